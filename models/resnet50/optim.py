"""MLPerf ResNet-50 optimizers: LARS, polynomial decay with warmup, the SGD path and their MLPerf log keys."""
import math

import suite  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf

# Closed-division constants (training_policies v1.1, compliance checker training_1.1.0).
CLOSED_END_LR = 0.0001
CLOSED_POLY_POWER = 2
CLOSED_WEIGHT_DECAY_UNIT = 0.0001
CLOSED_SGD_LR_UNIT = 0.001
CLOSED_MOMENTUM = 0.9
# The LARS trust coefficient of the reference; the v1.1/v2.1 rules do not let it be tuned.
CLOSED_LARS_EETA = 0.001
# Below this global batch the rules fix the LARS momentum to 0.9.
LARS_FREE_MOMENTUM_BATCH = 32768
# The compliance checker's own integer tolerance (mlp_compliance.is_integer).
_CHECKER_INTEGER_TOLERANCE = 1e-5

_SERIALIZABLE_PACKAGE = "mlperf_resnet50"


def is_vector_or_scalar(variable) -> bool:
    """True for 0-D and 1-D variables: the ones LARS leaves alone.

    In ResNet-50 these are exactly the BatchNorm gammas and betas and the fc bias,
    i.e. the variables the reference LARS's name skip list ['batch_normalization', 'bias', 'bn']
    matches; testing the rank does not depend on how layers are named.
    """
    return len(variable.shape) <= 1


@tf.keras.utils.register_keras_serializable(package=_SERIALIZABLE_PACKAGE)
class LARS(tf.keras.optimizers.Optimizer):
    """Layer-wise Adaptive Rate Scaling with momentum, as in the MLPerf ResNet-50 reference.

    For a variable w with gradient g that is not skipped:
        trust = eeta·‖w‖ / (‖g‖ + weight_decay·‖w‖ + epsilon), or 1 when ‖w‖ = 0 or ‖g‖ = 0
        g' = g + weight_decay·w
        m  = momentum·m − learning_rate·trust·g'
        w  = w + m
    Skipped variables (default: `is_vector_or_scalar`) get neither weight decay nor the
    trust ratio: plain momentum SGD. The learning rate (or schedule) is evaluated at the
    optimizer's `iterations` before it is incremented, so the first update uses step 0.

    Unlike the reference, epsilon=0.0 really is zero (the reference replaced 0 by 1e-7).
    Sparse gradients are densified and then treated like dense ones.
    A custom `skip_adaptation` predicate is kept by get_config() so that in-memory clones
    (hvd.DistributedOptimizer rebuilds the optimizer from its config) keep it, but such a
    config cannot be written as JSON.
    """

    def __init__(self, learning_rate, momentum=0.9, eeta=0.001, epsilon=0.0, weight_decay=0.0,
                 skip_adaptation=None, name="LARS", **kwargs):
        if momentum < 0.0:
            raise ValueError(f"momentum must be >= 0, got {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        if epsilon < 0.0:
            raise ValueError(f"epsilon must be >= 0, got {epsilon}")
        super().__init__(name=name, **kwargs)
        self._learning_rate = self._build_learning_rate(learning_rate)
        self.momentum = momentum
        self.eeta = eeta
        self.epsilon = epsilon
        self.weight_decay = weight_decay
        self._custom_skip = skip_adaptation
        self.skip_adaptation = skip_adaptation or is_vector_or_scalar

    def build(self, var_list):
        super().build(var_list)
        if getattr(self, "_built", False):
            return
        self.momentums = [self.add_variable_from_reference(model_variable=v, variable_name="m")
                          for v in var_list]
        self._built = True

    def _apply_weight_decay(self, variables):
        # The base class would apply `weight_decay` again as decoupled decay; in LARS it is
        # part of the gradient (update_step).
        return

    def momentum_slot(self, variable):
        """The momentum variable that belongs to `variable` (after build)."""
        return self.momentums[self._index_dict[self._var_key(variable)]]

    def update_step(self, gradient, variable):
        if isinstance(gradient, tf.IndexedSlices):
            gradient = tf.convert_to_tensor(gradient)
        dtype = variable.dtype
        lr = tf.cast(self.learning_rate, dtype)
        if not self.skip_adaptation(variable):
            lr, gradient = self._adapt(lr, gradient, variable)
        m = self.momentum_slot(variable)
        m.assign(tf.cast(self.momentum, dtype) * m - lr * gradient)
        variable.assign_add(m)

    def _adapt(self, lr, gradient, variable):
        """Scales lr by the trust ratio and adds the weight-decay gradient."""
        dtype = variable.dtype
        weight_decay = tf.cast(self.weight_decay, dtype)
        w = tf.convert_to_tensor(variable)
        w_norm = tf.norm(w)
        g_norm = tf.norm(gradient)
        denominator = g_norm + weight_decay * w_norm + tf.cast(self.epsilon, dtype)
        # divide_no_nan keeps the unused branch finite when both norms are 0 and epsilon is 0.
        ratio = tf.math.divide_no_nan(tf.cast(self.eeta, dtype) * w_norm, denominator)
        usable = tf.logical_and(w_norm > 0, g_norm > 0)
        trust_ratio = tf.where(usable, ratio, tf.ones_like(ratio))
        return lr * trust_ratio, gradient + weight_decay * w

    def get_config(self):
        config = super().get_config()
        config.update({
            "learning_rate": self._serialize_hyperparameter(self._learning_rate),
            "momentum": self.momentum,
            "eeta": self.eeta,
            "epsilon": self.epsilon,
            "weight_decay": self.weight_decay,
        })
        if self._custom_skip is not None:
            config["skip_adaptation"] = self._custom_skip
        return config


@tf.keras.utils.register_keras_serializable(package=_SERIALIZABLE_PACKAGE)
class PolynomialDecayWithWarmup(tf.keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup to base_lr, then polynomial decay to end_lr: the MLPerf reference schedule.

    lr(step) = base_lr·step/warmup_steps                  for step <= warmup_steps
             = PolynomialDecay(base_lr, decay_steps, end_lr, power)(step − warmup_steps) after,
    with decay_steps = total_steps − warmup_steps + 1 (log this as ..._learning_rate_decay_steps).

    Keras optimizers pass `iterations` before incrementing it, so the first update uses
    step 0 (lr 0 when warmup_steps > 0) and the last of total_steps updates uses step
    total_steps − 1, where lr = end_lr + (base_lr − end_lr)·(2/decay_steps)^power; the
    reference behaves the same. With warmup_steps = 0 the decay starts at step 0 (base_lr).
    """

    def __init__(self, base_lr, warmup_steps, total_steps, end_lr=0.0001, power=2.0, name=None):
        super().__init__()
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
        if total_steps < warmup_steps:
            raise ValueError(f"total_steps ({total_steps}) must be >= warmup_steps ({warmup_steps})")
        self.base_lr = base_lr
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.end_lr = end_lr
        self.power = power
        self.name = name
        self.decay_steps = total_steps - warmup_steps + 1
        self._decay = tf.keras.optimizers.schedules.PolynomialDecay(
            initial_learning_rate=base_lr, decay_steps=self.decay_steps,
            end_learning_rate=end_lr, power=power)

    def __call__(self, step):
        with tf.name_scope(self.name or "PolynomialDecayWithWarmup"):
            step = tf.cast(step, tf.float32)
            decayed = self._decay(step - self.warmup_steps)
            if self.warmup_steps == 0:
                return decayed
            warmup = tf.cast(self.base_lr, tf.float32) * step / self.warmup_steps
            return tf.where(step <= self.warmup_steps, warmup, decayed)

    def get_config(self):
        return {"base_lr": self.base_lr, "warmup_steps": self.warmup_steps,
                "total_steps": self.total_steps, "end_lr": self.end_lr,
                "power": self.power, "name": self.name}


def _normalise_name(name: str) -> str:
    key = name.lower()
    if key not in ("lars", "sgd"):
        raise ValueError(f"unknown optimizer '{name}': choose lars or sgd")
    return key


def build_optimizer(name: str, base_lr: float, warmup_steps: int, total_steps: int, momentum: float,
                    weight_decay: float, end_lr: float = 1e-4, power: float = 2.0, eeta: float = 0.001,
                    epsilon: float = 0.0
                    ) -> tuple[tf.keras.optimizers.Optimizer, PolynomialDecayWithWarmup]:
    """The optimizer `name` ("lars" or "sgd") and its learning-rate schedule.

    For "sgd" weight decay is not part of the optimizer: add
    `l2_regularization(l2_decayed_variables(model), weight_decay)` to the loss; eeta and
    epsilon are LARS-only and ignored.
    """
    key = _normalise_name(name)
    schedule = PolynomialDecayWithWarmup(base_lr, warmup_steps, total_steps, end_lr=end_lr, power=power)
    if key == "lars":
        optimizer = LARS(schedule, momentum=momentum, eeta=eeta, epsilon=epsilon, weight_decay=weight_decay)
    else:
        optimizer = tf.keras.optimizers.SGD(schedule, momentum=momentum)
    return optimizer, schedule


def batch_norm_parameters(model) -> list:
    """The trainable gammas and betas of every BatchNormalization layer in `model`."""
    return [variable for layer in model.submodules if isinstance(layer, tf.keras.layers.BatchNormalization)
            for variable in layer.trainable_weights]


def l2_decayed_variables(model) -> list:
    """The variables the SGD path's L2 term covers: all trainable ones but the BN gammas and betas.

    The reference decays every trainable variable whose name lacks 'bn' (TF2) or
    'batch_normalization' (TF1), so the fc bias is decayed, unlike under LARS. Selecting by
    layer type keeps that true whatever the layers are called.
    """
    batch_norm = {id(variable) for variable in batch_norm_parameters(model)}
    return [variable for variable in model.trainable_variables if id(variable) not in batch_norm]


def l2_regularization(variables, weight_decay) -> tf.Tensor:
    """The SGD path's weight-decay loss term: weight_decay·Σ‖w‖² over `variables`.

    Pass `l2_decayed_variables(model)`. This is what the MLPerf TF2 reference adds
    (weight_decay·2·Σ tf.nn.l2_loss(w)), so its gradient is 2·weight_decay·w. Add it once to
    the per-replica mean loss; Horovod averages gradients, so no division by the worker count.
    Computed in float32.
    """
    variables = list(variables)
    if weight_decay == 0 or not variables:
        return tf.constant(0.0, tf.float32)
    squares = [tf.reduce_sum(tf.square(tf.cast(v, tf.float32))) for v in variables]
    return tf.cast(weight_decay, tf.float32) * tf.add_n(squares)


def mlperf_hyperparameters(name, base_lr, warmup_epochs, decay_steps_logged, momentum, weight_decay,
                           end_lr, power, epsilon) -> dict[str, object]:
    """MLPerf log keys and values for the chosen optimizer, in logging order.

    decay_steps_logged should be `PolynomialDecayWithWarmup.decay_steps`
    (total_steps − warmup_steps + 1), as the reference logs. model_bn_span is the caller's.
    """
    key = _normalise_name(name)
    if key == "lars":
        return {
            "opt_name": "lars",
            "lars_epsilon": float(epsilon),
            "lars_opt_weight_decay": float(weight_decay),
            "lars_opt_base_learning_rate": float(base_lr),
            "lars_opt_learning_rate_warmup_epochs": warmup_epochs,
            "lars_opt_end_learning_rate": float(end_lr),
            "lars_opt_learning_rate_decay_steps": int(decay_steps_logged),
            "lars_opt_learning_rate_decay_poly_power": float(power),
            "lars_opt_momentum": float(momentum),
        }
    return {
        "opt_name": "sgd",
        "sgd_opt_base_learning_rate": float(base_lr),
        "sgd_opt_end_learning_rate": float(end_lr),
        "sgd_opt_learning_rate_decay_poly_power": float(power),
        "sgd_opt_learning_rate_decay_steps": int(decay_steps_logged),
        "sgd_opt_weight_decay": float(weight_decay),
        "sgd_opt_momentum": float(momentum),
        "opt_learning_rate_warmup_epochs": warmup_epochs,
    }


def _is_checker_integer(value: float) -> bool:
    return abs(round(value) - value) < _CHECKER_INTEGER_TOLERANCE


def _is_legal_weight_decay(weight_decay: float) -> bool:
    return weight_decay > 0 and _is_checker_integer(math.log2(weight_decay / CLOSED_WEIGHT_DECAY_UNIT))


def closed_rule_violations(name, base_lr, momentum, weight_decay, end_lr, power, epsilon=0.0,
                           global_batch_size=None, eeta=CLOSED_LARS_EETA, warmup_epochs=0) -> list[str]:
    """Human-readable breaches of the closed-division optimizer rules; empty when compliant.

    Checks what the 1.1.0 compliance checker checks plus the rule-table items it does not
    (SGD momentum and power, and its warmup in whole epochs; LARS momentum 0.9 below a 32k batch,
    when the batch is given; the LARS eeta, which no MLPerf log key carries). LARS's warmup may be any
    constant.
    """
    key = name.lower()
    if key not in ("lars", "sgd"):
        return [f"optimizer '{name}' is not allowed in the closed division (lars or sgd)"]
    violations = []
    if not _is_legal_weight_decay(weight_decay):
        violations.append(f"{key} weight decay {weight_decay} is not 0.0001 * 2^N for an integer N")
    if end_lr != CLOSED_END_LR:
        violations.append(f"{key} end learning rate {end_lr} is not {CLOSED_END_LR}")
    if power != CLOSED_POLY_POWER:
        violations.append(f"{key} polynomial decay power {power} is not {CLOSED_POLY_POWER}")
    if key == "lars":
        if epsilon != 0.0:
            violations.append(f"lars epsilon {epsilon} is not 0.0")
        if eeta != CLOSED_LARS_EETA:
            violations.append(f"lars eeta (trust coefficient) {eeta} is not {CLOSED_LARS_EETA}")
        if (global_batch_size is not None and global_batch_size < LARS_FREE_MOMENTUM_BATCH
                and momentum != CLOSED_MOMENTUM):
            violations.append(f"lars momentum {momentum} is not {CLOSED_MOMENTUM} "
                              f"for a global batch below {LARS_FREE_MOMENTUM_BATCH}")
    else:
        if not _is_checker_integer(base_lr / CLOSED_SGD_LR_UNIT):
            violations.append(f"sgd base learning rate {base_lr} is not a multiple of {CLOSED_SGD_LR_UNIT}")
        if momentum != CLOSED_MOMENTUM:
            violations.append(f"sgd momentum {momentum} is not {CLOSED_MOMENTUM}")
        if warmup_epochs < 0 or warmup_epochs != int(warmup_epochs):
            # The rules' hyperparameter table: opt_learning_rate_warmup_epochs, an integer >= 0.
            violations.append(f"sgd warmup_epochs {warmup_epochs} is not a whole number of epochs")
    return violations
