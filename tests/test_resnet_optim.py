"""Tests for models/resnet50/optim.py against independent NumPy versions of the MLPerf formulas."""
import suite  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf

from models.resnet50 import optim
from models.resnet50.model import build_resnet50

RTOL = 1e-5
ATOL = 1e-7
# Weights are O(1) and accumulate float32 rounding (eps 1.2e-7) over the steps.
WEIGHT_ATOL = 1e-6


# ---------------------------------------------------------------- NumPy references

def np_schedule(step, base_lr, warmup_steps, total_steps, end_lr=1e-4, power=2.0):
    if warmup_steps > 0 and step <= warmup_steps:
        return base_lr * step / warmup_steps
    decay_steps = total_steps - warmup_steps + 1
    t = min(step - warmup_steps, decay_steps) / decay_steps
    return (base_lr - end_lr) * (1.0 - t) ** power + end_lr


def np_lars_step(w, m, g, lr, skipped, momentum, eeta, eps, wd):
    """One MLPerf LARS update in float64; returns new (w, m)."""
    if not skipped:
        w_norm = np.sqrt(np.sum(w * w))
        g_norm = np.sqrt(np.sum(g * g))
        trust = 1.0
        if w_norm > 0 and g_norm > 0:
            trust = eeta * w_norm / (g_norm + wd * w_norm + eps)
        g = g + wd * w
        lr = lr * trust
    m = momentum * m - lr * g
    return w + m, m


def run_np_lars(init, grads, lrs, skipped, momentum=0.9, eeta=0.001, eps=0.0, wd=0.0):
    """Per-step history [(weights, momenta)] for lists of arrays."""
    ws = [x.astype(np.float64) for x in init]
    ms = [np.zeros_like(x) for x in ws]
    history = []
    for step_grads, lr in zip(grads, lrs):
        for i, g in enumerate(step_grads):
            ws[i], ms[i] = np_lars_step(ws[i], ms[i], g.astype(np.float64), lr, skipped[i],
                                        momentum, eeta, eps, wd)
        history.append(([w.copy() for w in ws], [m.copy() for m in ms]))
    return history


# ---------------------------------------------------------------- fixtures

SHAPES = {"kernel": (4, 3), "conv": (3, 3, 2, 4), "gamma": (4,), "bias": (3,),
          "zero_init": (5, 2), "zero_grad": (2, 3)}
SKIPPED = [False, False, True, True, False, False]


def make_problem(steps=5, seed=0, grad_scale=1.0):
    rng = np.random.default_rng(seed)
    init = []
    for name, shape in SHAPES.items():
        if name == "zero_init":
            init.append(np.zeros(shape, np.float32))
        elif name == "gamma":
            init.append((1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32))
        else:
            init.append(rng.standard_normal(shape).astype(np.float32))
    grads = []
    for _ in range(steps):
        step = [(grad_scale * rng.standard_normal(s)).astype(np.float32) for s in SHAPES.values()]
        step[-1] = np.zeros(SHAPES["zero_grad"], np.float32)
        grads.append(step)
    return init, grads


def run_tf(opt, init, grads, step_fn=None):
    variables = [tf.Variable(x) for x in init]
    opt.build(variables)

    def apply(step_grads):
        opt.apply_gradients(zip(step_grads, variables))

    apply_fn = step_fn(apply) if step_fn else apply
    history = []
    for step_grads in grads:
        apply_fn([tf.constant(g) for g in step_grads])
        history.append(([v.numpy() for v in variables],
                        [opt.momentum_slot(v).numpy() for v in variables]))
    return history


def assert_histories_close(got, want, rtol=RTOL):
    assert len(got) == len(want)
    for step, ((gw, gm), (ww, wm)) in enumerate(zip(got, want)):
        for i, name in enumerate(SHAPES):
            np.testing.assert_allclose(gw[i], ww[i], rtol=rtol, atol=WEIGHT_ATOL,
                                       err_msg=f"w {name} step {step}")
            np.testing.assert_allclose(gm[i], wm[i], rtol=rtol, atol=ATOL, err_msg=f"m {name} step {step}")


def schedule_args():
    return dict(base_lr=6.0, warmup_steps=2, total_steps=5, end_lr=1e-4, power=2.0)


# ---------------------------------------------------------------- LARS

def test_lars_matches_numpy_over_several_steps():
    init, grads = make_problem()
    args = schedule_args()
    wd, eeta = 5e-3, 0.02
    opt = optim.LARS(optim.PolynomialDecayWithWarmup(**args), momentum=0.9, eeta=eeta, weight_decay=wd)
    lrs = [np_schedule(s, **args) for s in range(len(grads))]
    want = run_np_lars(init, grads, lrs, SKIPPED, eeta=eeta, wd=wd)
    assert_histories_close(run_tf(opt, init, grads), want)


def test_zero_norm_rules_give_trust_ratio_one():
    init, grads = make_problem(steps=2)
    opt = optim.LARS(0.5, momentum=0.9, eeta=0.001, weight_decay=0.01)
    got = run_tf(opt, init, grads)
    zero_init, zero_grad = 4, 5
    # First step on a zero variable: plain lr·(g + wd·0), no eeta factor.
    np.testing.assert_allclose(got[0][1][zero_init], -0.5 * grads[0][zero_init], rtol=RTOL)
    # Zero gradient: the update is the weight decay alone at the full lr.
    np.testing.assert_allclose(got[0][1][zero_grad], -0.5 * 0.01 * init[zero_grad], rtol=RTOL)


def test_epsilon_zero_is_really_zero():
    # Gradients of norm ~1e-6 make an epsilon of 1e-7 change the trust ratio by ~10%.
    init, grads = make_problem(steps=3, grad_scale=1e-7)
    lrs = [1.0] * 3
    opt = optim.LARS(1.0, epsilon=0.0)
    got = run_tf(opt, init, grads)
    assert_histories_close(got, run_np_lars(init, grads, lrs, SKIPPED, eps=0.0))
    with_eps = run_np_lars(init, grads, lrs, SKIPPED, eps=1e-7)
    assert not np.allclose(got[-1][1][0], with_eps[-1][1][0], rtol=1e-3, atol=0)
    assert optim.LARS(1.0).get_config()["epsilon"] == 0.0


def test_nonzero_epsilon_is_used():
    init, grads = make_problem(steps=3, grad_scale=1e-7)
    got = run_tf(optim.LARS(1.0, epsilon=1e-7), init, grads)
    assert_histories_close(got, run_np_lars(init, grads, [1.0] * 3, SKIPPED, eps=1e-7))


def test_skipped_variables_get_plain_momentum_sgd():
    init, grads = make_problem(steps=4)
    lr, momentum = 0.3, 0.8
    got = run_tf(optim.LARS(lr, momentum=momentum, weight_decay=0.1), init, grads)
    for i in (2, 3):  # gamma, bias
        w, m = init[i].astype(np.float64), np.zeros(init[i].shape)
        for step, step_grads in enumerate(grads):
            m = momentum * m - lr * step_grads[i]
            w = w + m
            np.testing.assert_allclose(got[step][0][i], w, rtol=RTOL, atol=WEIGHT_ATOL)


def test_custom_skip_predicate():
    init, grads = make_problem(steps=2)
    got = run_tf(optim.LARS(0.3, weight_decay=0.1, skip_adaptation=lambda v: False), init, grads)
    want = run_np_lars(init, grads, [0.3, 0.3], [False] * len(SHAPES), wd=0.1)
    assert_histories_close(got, want)


def test_first_update_uses_step_zero():
    init, grads = make_problem(steps=2)
    args = schedule_args()
    opt = optim.LARS(optim.PolynomialDecayWithWarmup(**args))
    got = run_tf(opt, init, grads)
    for before, after in zip(init, got[0][0]):
        np.testing.assert_array_equal(before, after)  # lr(0) = 0 during warmup
    assert int(opt.iterations.numpy()) == 2
    np.testing.assert_allclose(float(opt.learning_rate), args["base_lr"] / args["warmup_steps"], rtol=RTOL)


def test_lars_xla_matches_eager():
    init, grads = make_problem(steps=3)
    make = lambda: optim.LARS(optim.PolynomialDecayWithWarmup(**schedule_args()),  # noqa: E731
                              eeta=0.02, weight_decay=5e-3)
    eager = run_tf(make(), init, grads)
    xla = run_tf(make(), init, grads, step_fn=lambda f: tf.function(f, jit_compile=True))
    assert_histories_close(xla, eager)


def test_sparse_gradient_is_densified():
    rng = np.random.default_rng(1)
    init = rng.standard_normal((6, 3)).astype(np.float32)
    values = rng.standard_normal((2, 3)).astype(np.float32)
    dense = np.zeros((6, 3), np.float32)
    dense[[1, 4]] = values
    sparse = tf.IndexedSlices(tf.constant(values), tf.constant([1, 4]), tf.constant([6, 3]))
    results = []
    for grad in (sparse, tf.constant(dense)):
        v = tf.Variable(init)
        optim.LARS(1.0, weight_decay=0.01).apply_gradients([(grad, v)])
        results.append(v.numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=RTOL)
    assert not np.allclose(results[0], init)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_loss_scale_optimizer_trains_one_step(policy):
    previous = tf.keras.mixed_precision.global_policy()
    tf.keras.mixed_precision.set_global_policy(policy)
    try:
        model = tf.keras.Sequential([
            tf.keras.layers.Dense(8, input_shape=(4,)),
            tf.keras.layers.BatchNormalization(),
            tf.keras.layers.ReLU(),
            tf.keras.layers.Dense(3, dtype="float32"),
        ])
        schedule = optim.PolynomialDecayWithWarmup(1.0, 0, 10)
        opt = tf.keras.mixed_precision.LossScaleOptimizer(optim.LARS(schedule, weight_decay=1e-4))
        x = tf.random.stateless_normal((16, 4), seed=(1, 2))
        y = tf.constant(np.arange(16) % 3)
        loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
                scaled = opt.get_scaled_loss(loss)
            grads = opt.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))
            opt.apply_gradients(zip(grads, model.trainable_variables))

        before = [v.numpy() for v in model.trainable_variables]
        step()
        after = [v.numpy() for v in model.trainable_variables]
        assert int(opt.iterations.numpy()) == 1
        assert all(a.dtype == np.float32 for a in after)
        assert all(np.all(np.isfinite(a)) for a in after)
        assert all(not np.array_equal(b, a) for b, a in zip(before, after))
    finally:
        tf.keras.mixed_precision.set_global_policy(previous)


def test_get_config_round_trip():
    schedule = optim.PolynomialDecayWithWarmup(3.0, 4, 20, end_lr=1e-3, power=1.5)
    opt = optim.LARS(schedule, momentum=0.8, eeta=0.002, epsilon=1e-9, weight_decay=2e-4)
    config = opt.get_config()
    clone = optim.LARS.from_config(config)
    assert {k: config[k] for k in ("momentum", "eeta", "epsilon", "weight_decay")} == {
        "momentum": 0.8, "eeta": 0.002, "epsilon": 1e-9, "weight_decay": 2e-4}
    assert "skip_adaptation" not in config
    assert isinstance(clone._learning_rate, optim.PolynomialDecayWithWarmup)
    for step in (0, 3, 10, 30):
        assert float(clone._learning_rate(step)) == pytest.approx(float(schedule(step)))
    predicate = lambda v: True  # noqa: E731
    assert optim.LARS(1.0, skip_adaptation=predicate).get_config()["skip_adaptation"] is predicate


def test_invalid_lars_arguments():
    for kwargs in ({"momentum": -0.1}, {"weight_decay": -1e-4}, {"epsilon": -1.0}):
        with pytest.raises(ValueError):
            optim.LARS(1.0, **kwargs)


# ---------------------------------------------------------------- schedule

@pytest.mark.parametrize("warmup_steps,total_steps", [(10, 50), (0, 50), (1, 7), (37, 37)])
def test_schedule_matches_numpy(warmup_steps, total_steps):
    base, end = 8.5, 1e-4
    schedule = optim.PolynomialDecayWithWarmup(base, warmup_steps, total_steps, end_lr=end)
    steps = sorted({0, 1, warmup_steps // 2, max(warmup_steps - 1, 0), warmup_steps, warmup_steps + 1,
                    (warmup_steps + total_steps) // 2, total_steps - 1, total_steps, total_steps + 1,
                    total_steps + 100})
    for step in steps:
        want = np_schedule(step, base, warmup_steps, total_steps, end_lr=end)
        assert float(schedule(tf.constant(step, tf.int64))) == pytest.approx(want, rel=1e-5, abs=1e-7), step
    assert np.isfinite(float(schedule(0)))


def test_schedule_end_values():
    base, warmup, total, end = 10.0, 100, 1000, 1e-4
    schedule = optim.PolynomialDecayWithWarmup(base, warmup, total, end_lr=end)
    decay_steps = total - warmup + 1
    assert schedule.decay_steps == decay_steps
    last_update = float(schedule(total - 1))
    assert last_update == pytest.approx(end + (base - end) * (2 / decay_steps) ** 2, rel=1e-5)
    assert last_update < 1e-3
    assert float(schedule(total + 1)) == pytest.approx(end, rel=1e-5)
    assert float(schedule(warmup)) == pytest.approx(base, rel=1e-6)
    assert float(schedule(0)) == 0.0


def test_schedule_no_warmup_starts_at_base_lr():
    schedule = optim.PolynomialDecayWithWarmup(2.0, 0, 10)
    assert float(schedule(0)) == pytest.approx(2.0)
    assert schedule.decay_steps == 11


def test_schedule_rejects_bad_steps():
    with pytest.raises(ValueError):
        optim.PolynomialDecayWithWarmup(1.0, 10, 5)
    with pytest.raises(ValueError):
        optim.PolynomialDecayWithWarmup(1.0, -1, 5)


def test_schedule_get_config_round_trip():
    schedule = optim.PolynomialDecayWithWarmup(1.5, 3, 9, end_lr=1e-3, power=3.0)
    clone = optim.PolynomialDecayWithWarmup.from_config(schedule.get_config())
    for step in range(12):
        assert float(clone(step)) == pytest.approx(float(schedule(step)))


# ---------------------------------------------------------------- SGD path

def test_sgd_with_l2_matches_numpy():
    model = tf.keras.Sequential([tf.keras.layers.Dense(2, input_shape=(3,)),
                                 tf.keras.layers.BatchNormalization()])
    variables = model.trainable_variables  # dense kernel, dense bias, BN gamma, BN beta
    rng = np.random.default_rng(3)
    for v in variables:
        v.assign(rng.standard_normal(v.shape).astype(np.float32))
    decayed = [True, True, False, False]  # the reference decays the bias but not BN
    coeffs = [rng.standard_normal(v.shape).astype(np.float32) for v in variables]
    args = dict(base_lr=0.4, warmup_steps=1, total_steps=4)
    wd, momentum = 1e-2, 0.9
    opt, schedule = optim.build_optimizer("sgd", momentum=momentum, weight_decay=wd, **args)
    assert isinstance(opt, tf.keras.optimizers.SGD)
    ws = [v.numpy().astype(np.float64) for v in variables]
    ms = [np.zeros_like(w) for w in ws]
    for step in range(4):
        with tf.GradientTape() as tape:
            data_loss = tf.add_n([tf.reduce_sum(tf.constant(c) * v) for c, v in zip(coeffs, variables)])
            loss = data_loss + optim.l2_regularization(optim.l2_decayed_variables(model), wd)
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        lr = np_schedule(step, **args)
        for i in range(len(ws)):
            g = coeffs[i] + (2 * wd * ws[i] if decayed[i] else 0.0)
            ms[i] = momentum * ms[i] - lr * g
            ws[i] = ws[i] + ms[i]
            np.testing.assert_allclose(variables[i].numpy(), ws[i], rtol=RTOL, atol=WEIGHT_ATOL)


def test_l2_regularization_value():
    kernel = np.arange(6, dtype=np.float32).reshape(2, 3)
    variables = [tf.Variable(kernel), tf.Variable(np.ones(3, np.float32)), tf.Variable(2.0)]
    got = float(optim.l2_regularization(variables, 1e-3))
    assert got == pytest.approx(1e-3 * (np.sum(kernel ** 2) + 3 + 4), rel=1e-6)
    assert float(optim.l2_regularization(variables, 0.0)) == 0.0
    assert float(optim.l2_regularization([], 1e-3)) == 0.0


def test_resnet50_l2_decays_all_but_batch_norm_gamma_and_beta():
    model = build_resnet50(num_classes=4, image_size=32)
    rng = np.random.default_rng(5)
    for v in model.trainable_variables:
        if v.name.endswith(("/bias:0", "/beta:0")):  # zeros at init: give them something to decay
            v.assign(rng.standard_normal(v.shape).astype(np.float32))
    wd = 1e-3
    with tf.GradientTape() as tape:
        l2 = optim.l2_regularization(optim.l2_decayed_variables(model), wd)
    grads = tape.gradient(l2, model.trainable_variables)
    regularized = {v.name for v, g in zip(model.trainable_variables, grads) if g is not None}
    batch_norm = {v.name for v in model.trainable_variables if v.name.endswith(("/gamma:0", "/beta:0"))}
    assert regularized == {v.name for v in model.trainable_variables} - batch_norm
    assert "fc1000/bias:0" in regularized and "fc1000/kernel:0" in regularized
    want = wd * sum(np.sum(np.square(v.numpy().astype(np.float64)))
                    for v in model.trainable_variables if v.name in regularized)
    assert float(l2) == pytest.approx(want, rel=1e-5)
    for v, g in zip(model.trainable_variables, grads):
        if g is not None:
            np.testing.assert_allclose(g.numpy(), 2 * wd * v.numpy(), rtol=RTOL, atol=ATOL, err_msg=v.name)


def test_lars_skips_exactly_batch_norm_and_the_fc_bias_in_resnet50():
    # The reference LARS skip list: names with 'batch_normalization', 'bias' or 'bn'.
    model = build_resnet50(num_classes=4, image_size=32)
    skipped = {v.name for v in model.trainable_variables if optim.is_vector_or_scalar(v)}
    assert skipped == {v.name for v in model.trainable_variables
                       if v.name.endswith(("/gamma:0", "/beta:0", "/bias:0"))}


def test_build_optimizer_lars_and_unknown_name():
    opt, schedule = optim.build_optimizer("lars", base_lr=10.5, warmup_steps=786, total_steps=13755,
                                          momentum=0.9, weight_decay=5e-5)
    assert isinstance(opt, optim.LARS)
    assert opt._learning_rate is schedule
    assert schedule.decay_steps == 13755 - 786 + 1
    with pytest.raises(ValueError, match="unknown optimizer 'adam': choose lars or sgd"):
        optim.build_optimizer("adam", 1.0, 0, 10, 0.9, 1e-4)


# ---------------------------------------------------------------- MLPerf keys and rules

def test_mlperf_hyperparameter_keys():
    common = dict(base_lr=10.5, warmup_epochs=2, decay_steps_logged=13000.0, momentum=0.9,
                  weight_decay=5e-5, end_lr=1e-4, power=2.0, epsilon=0.0)
    lars = optim.mlperf_hyperparameters("lars", **common)
    assert set(lars) == {
        "opt_name", "lars_epsilon", "lars_opt_weight_decay", "lars_opt_base_learning_rate",
        "lars_opt_learning_rate_warmup_epochs", "lars_opt_end_learning_rate",
        "lars_opt_learning_rate_decay_steps", "lars_opt_learning_rate_decay_poly_power", "lars_opt_momentum"}
    assert lars["opt_name"] == "lars"
    assert isinstance(lars["lars_opt_learning_rate_decay_steps"], int)
    sgd = optim.mlperf_hyperparameters("sgd", **common)
    assert set(sgd) == {
        "opt_name", "sgd_opt_base_learning_rate", "sgd_opt_end_learning_rate",
        "sgd_opt_learning_rate_decay_poly_power", "sgd_opt_learning_rate_decay_steps",
        "sgd_opt_weight_decay", "sgd_opt_momentum", "opt_learning_rate_warmup_epochs"}
    assert sgd["opt_name"] == "sgd"


def closed(name="lars", **overrides):
    args = dict(base_lr=10.5, momentum=0.9, weight_decay=5e-5, end_lr=1e-4, power=2, epsilon=0.0)
    args.update(overrides)
    return optim.closed_rule_violations(name, **args)


def test_closed_rules_accept_reference_settings():
    assert closed() == []
    assert closed("sgd", base_lr=0.256) == []
    for wd in (1e-4, 5e-5, 2.5e-5, 2e-4, 8e-4):
        assert closed(weight_decay=wd) == [], wd


def test_closed_rules_flag_violations():
    assert len(closed(weight_decay=3e-5)) == 1
    assert len(closed(weight_decay=0.0)) == 1
    assert len(closed(end_lr=1e-3)) == 1
    assert len(closed(power=1)) == 1
    assert len(closed(epsilon=1e-7)) == 1
    assert closed("sgd", base_lr=0.2565) != []
    assert closed("sgd", base_lr=0.256, momentum=0.95) != []
    assert closed(momentum=0.95, global_batch_size=3264) != []
    assert closed(momentum=0.95, global_batch_size=65536) == []
    assert closed("adam") != []
    assert closed(eeta=0.001) == []


def test_closed_rules_fix_the_lars_trust_coefficient():
    assert closed(eeta=0.002) == ["lars eeta (trust coefficient) 0.002 is not 0.001"]
    assert closed("sgd", base_lr=0.256, eeta=0.002) == []  # SGD has no trust ratio
    assert len(closed("sgd", base_lr=0.1005, weight_decay=3e-5, end_lr=0.0, power=1, momentum=0.8)) == 5
