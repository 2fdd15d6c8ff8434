"""MLPerf BERT optimizer: LAMB as the reference's lamb_optimizer_v1, its LR schedule and MLPerf log keys."""
import re

import suite  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf

# The reference's exclusion list (optimization.py), matched with re.search on the variable name.
REFERENCE_EXCLUSIONS = ("LayerNorm", "layer_norm", "bias")
# Closed-division values that are not tunable (training_policies v2.1, "Tunable hyperparameters").
CLOSED_POLY_POWER = 1.0
CLOSED_END_LR = 0.0
CLOSED_CLIP_NORM = 1.0

_SERIALIZABLE_PACKAGE = "mlperf_bert"


def _matches_any(patterns, name) -> bool:
    return any(re.search(pattern, name) is not None for pattern in patterns or ())


@tf.keras.utils.register_keras_serializable(package=_SERIALIZABLE_PACKAGE)
class Lamb(tf.keras.optimizers.Optimizer):
    """LAMB exactly as the MLPerf reference (lamb_optimizer_v1.py), on the Keras optimizer API.

    For each variable w with gradient g, at step t = applied_steps + 1:
        m = β1·m + (1−β1)·g            v = β2·v + (1−β2)·g²
        u = (m/(1−β1^t)) / (√(v/(1−β2^t)) + ε) + wd·w
        r = ‖w‖/‖u‖ if ‖w‖ > 0 and ‖u‖ > 0 else 1
        w = w − r·lr·u
    The wd·w term is left out for variables whose name matches a pattern of
    exclude_from_weight_decay (re.search on var.name), and r = 1 for names matching
    exclude_from_layer_adaptation (default: the weight-decay list, as the reference).

    global_clipnorm (default 1.0, the reference's clip_by_global_norm) clips all gradients
    of a step by their global norm before the update. The learning rate or schedule is
    evaluated at `iterations` before it is incremented, so the first update uses step 0.
    Sparse gradients are densified.

    t counts the updates actually applied (`applied_steps`, an optimizer variable that is
    checkpointed and broadcast with m and v), not `iterations`: a LossScaleOptimizer that
    skips a step on overflow still advances `iterations` but leaves m and v as they were.
    """

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-6, weight_decay_rate=0.01,
                 exclude_from_weight_decay=REFERENCE_EXCLUSIONS, exclude_from_layer_adaptation=None,
                 global_clipnorm=1.0, name="LAMB", **kwargs):
        if kwargs.get("weight_decay"):
            raise ValueError("Lamb applies weight_decay_rate itself; the Keras weight_decay must stay unset")
        kwargs.pop("weight_decay", None)
        super().__init__(name=name, global_clipnorm=global_clipnorm, **kwargs)
        self._learning_rate = self._build_learning_rate(learning_rate)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.weight_decay_rate = weight_decay_rate
        # Not self.exclude_from_weight_decay: that is a method of the Keras base class.
        self.weight_decay_exclusions = tuple(exclude_from_weight_decay or ())
        if exclude_from_layer_adaptation:
            self.layer_adaptation_exclusions = tuple(exclude_from_layer_adaptation)
        else:
            self.layer_adaptation_exclusions = self.weight_decay_exclusions

    def build(self, var_list):
        super().build(var_list)
        if getattr(self, "_built", False):
            return
        self._m = [self.add_variable_from_reference(model_variable=v, variable_name="m") for v in var_list]
        self._v = [self.add_variable_from_reference(model_variable=v, variable_name="v") for v in var_list]
        self._applied_steps = self.add_variable(shape=(), dtype=tf.int64, name="applied_steps")
        self._built = True

    @property
    def applied_steps(self):
        """The number of updates applied so far (after build); skipped loss-scale steps do not count."""
        return self._applied_steps

    def _internal_apply_gradients(self, grads_and_vars):
        # Keras counts `iterations` here too: this runs once per step, and only when the update
        # is applied (LossScaleOptimizer does not call it for a step it skips).
        iteration = super()._internal_apply_gradients(grads_and_vars)
        self._applied_steps.assign_add(1)
        return iteration

    def _apply_weight_decay(self, variables):
        # Weight decay is part of the LAMB update (update_step), not the base class's decoupled decay.
        return

    def slots(self, variable):
        """(m, v) of `variable` (after build)."""
        index = self._index_dict[self._var_key(variable)]
        return self._m[index], self._v[index]

    def uses_weight_decay(self, variable) -> bool:
        return not _matches_any(self.weight_decay_exclusions, variable.name)

    def uses_layer_adaptation(self, variable) -> bool:
        return not _matches_any(self.layer_adaptation_exclusions, variable.name)

    def update_step(self, gradient, variable):
        if isinstance(gradient, tf.IndexedSlices):
            gradient = tf.convert_to_tensor(gradient)
        dtype = variable.dtype
        step = tf.cast(self._applied_steps + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        m, v = self.slots(variable)
        m.assign(beta_1 * m + (1.0 - beta_1) * gradient)
        v.assign(beta_2 * v + (1.0 - beta_2) * tf.square(gradient))
        m_hat = m / (1.0 - tf.pow(beta_1, step))
        v_hat = v / (1.0 - tf.pow(beta_2, step))
        update = m_hat / (tf.sqrt(v_hat) + tf.cast(self.epsilon, dtype))
        w = tf.convert_to_tensor(variable)
        if self.uses_weight_decay(variable):
            update += tf.cast(self.weight_decay_rate, dtype) * w
        ratio = tf.constant(1.0, dtype)
        if self.uses_layer_adaptation(variable):
            ratio = _trust_ratio(tf.norm(w), tf.norm(update))
        variable.assign_sub(ratio * tf.cast(self.learning_rate, dtype) * update)

    def get_config(self):
        config = super().get_config()
        config.pop("weight_decay", None)
        config.update({
            "learning_rate": self._serialize_hyperparameter(self._learning_rate),
            "beta_1": self.beta_1,
            "beta_2": self.beta_2,
            "epsilon": self.epsilon,
            "weight_decay_rate": self.weight_decay_rate,
            "exclude_from_weight_decay": list(self.weight_decay_exclusions),
            "exclude_from_layer_adaptation": list(self.layer_adaptation_exclusions),
        })
        return config


def _trust_ratio(w_norm, u_norm):
    # divide_no_nan keeps the unused branch finite when ‖u‖ = 0.
    ratio = tf.math.divide_no_nan(w_norm, u_norm)
    return tf.where(tf.logical_and(w_norm > 0, u_norm > 0), ratio, tf.ones_like(ratio))


@tf.keras.utils.register_keras_serializable(package=_SERIALIZABLE_PACKAGE)
class PolynomialWarmup(tf.keras.optimizers.schedules.LearningRateSchedule):
    """The reference's learning rate (optimization.py create_optimizer), step by step.

    decayed = (init_lr − end_lr)·(1 − min(step, train_steps)/train_steps)^power + end_lr
    With warmup_steps > 0 and s = step − start_warmup_step (int32, as the reference):
        lr = init_lr·s/warmup_steps  while s < warmup_steps,  decayed after.
    The decay counts from step 0, not from the end of warmup. As in the reference, a
    positive start_warmup_step makes the steps before it "warmup" with s < 0, i.e. a
    negative learning rate; a negative one (NVIDIA's −100) starts warmup part-way.
    """

    def __init__(self, init_lr, train_steps, warmup_steps=0, start_warmup_step=0, power=1.0, end_lr=0.0,
                 name=None):
        super().__init__()
        if train_steps <= 0:
            raise ValueError(f"train_steps must be > 0, got {train_steps}")
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
        self.init_lr = init_lr
        self.train_steps = int(train_steps)
        self.warmup_steps = int(warmup_steps)
        self.start_warmup_step = int(start_warmup_step)
        self.power = power
        self.end_lr = end_lr
        self.name = name

    def __call__(self, step):
        with tf.name_scope(self.name or "PolynomialWarmup"):
            decay_step = tf.minimum(tf.cast(step, tf.float32), float(self.train_steps))
            remaining = 1.0 - decay_step / float(self.train_steps)
            decayed = (self.init_lr - self.end_lr) * tf.pow(remaining, self.power) + self.end_lr
            if not self.warmup_steps:
                return decayed
            warmup_step = tf.cast(step, tf.int32) - self.start_warmup_step
            warmup = self.init_lr * (tf.cast(warmup_step, tf.float32) / float(self.warmup_steps))
            return tf.where(warmup_step < self.warmup_steps, warmup, decayed)

    def get_config(self):
        return {"init_lr": self.init_lr, "train_steps": self.train_steps, "warmup_steps": self.warmup_steps,
                "start_warmup_step": self.start_warmup_step, "power": self.power, "end_lr": self.end_lr,
                "name": self.name}


BertSchedule = PolynomialWarmup


def build_optimizer(*, base_lr, train_steps, warmup_steps=0, start_warmup_step=0, beta_1=0.9, beta_2=0.999,
                    epsilon=1e-6, weight_decay=0.01, clip_norm=1.0) -> tuple[Lamb, PolynomialWarmup]:
    """LAMB with the reference schedule, exclusions and gradient clipping (clip_norm None or 0: none)."""
    schedule = PolynomialWarmup(base_lr, train_steps, warmup_steps=warmup_steps,
                                start_warmup_step=start_warmup_step)
    optimizer = Lamb(schedule, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon, weight_decay_rate=weight_decay,
                     global_clipnorm=clip_norm or None)
    return optimizer, schedule


def mlperf_hyperparameters(*, base_lr, train_steps, warmup_steps, start_warmup_step, beta_1, beta_2, epsilon,
                           weight_decay) -> dict[str, object]:
    """MLPerf log keys and values of the optimizer, in logging order.

    The epsilon goes out twice: `opt_epsilon` is what the 2.1.0 checker tag requires,
    `opt_lamb_epsilon` what the current checker requires for ruleset 2.1.0.
    """
    return {
        "opt_name": "lamb",
        "opt_base_learning_rate": float(base_lr),
        "opt_learning_rate_training_steps": int(train_steps),
        "opt_learning_rate_warmup_steps": int(warmup_steps),
        "num_warmup_steps": int(warmup_steps),
        "start_warmup_step": int(start_warmup_step),
        "opt_lamb_beta_1": float(beta_1),
        "opt_lamb_beta_2": float(beta_2),
        "opt_lamb_weight_decay_rate": float(weight_decay),
        "opt_epsilon": float(epsilon),
        "opt_lamb_epsilon": float(epsilon),
        "opt_lamb_learning_rate_decay_poly_power": CLOSED_POLY_POWER,
    }


def closed_rule_violations(*, power=CLOSED_POLY_POWER, end_lr=CLOSED_END_LR, clip_norm=CLOSED_CLIP_NORM,
                           exclude_from_weight_decay=REFERENCE_EXCLUSIONS,
                           exclude_from_layer_adaptation=None) -> list[str]:
    """Human-readable ways the non-tunable optimizer settings leave the closed division; empty if none.

    Batch size, learning rate, steps, warmup, betas, epsilon and weight decay are tunable
    and not checked here.
    """
    violations = []
    if power != CLOSED_POLY_POWER:
        violations.append(f"lamb polynomial decay power {power} is not {CLOSED_POLY_POWER}")
    if end_lr != CLOSED_END_LR:
        violations.append(f"lamb end learning rate {end_lr} is not {CLOSED_END_LR}")
    if clip_norm != CLOSED_CLIP_NORM:
        violations.append(f"gradient clip norm {clip_norm} is not {CLOSED_CLIP_NORM}")
    if tuple(exclude_from_weight_decay or ()) != REFERENCE_EXCLUSIONS:
        violations.append(f"weight-decay exclusions {list(exclude_from_weight_decay or ())} are not "
                          f"{list(REFERENCE_EXCLUSIONS)}")
    adaptation = tuple(exclude_from_layer_adaptation or exclude_from_weight_decay or ())
    if adaptation != REFERENCE_EXCLUSIONS:
        violations.append(f"layer-adaptation exclusions {list(adaptation)} are not "
                          f"{list(REFERENCE_EXCLUSIONS)}")
    return violations
