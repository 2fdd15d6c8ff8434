"""Tests for models/bert/optim.py against NumPy versions of the reference LAMB and learning-rate formulas."""
import suite  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf

from helpers.bert_reference import PRED, SEQ, TINY, random_features, random_labels
from models.bert import model as bert
from models.bert import optim

RTOL = 1e-5
ATOL = 1e-6
EXCLUDED = ("LayerNorm", "layer_norm", "bias")


# ---------------------------------------------------------------- NumPy references

def np_schedule(step, init_lr, train_steps, warmup_steps=0, start_warmup_step=0, power=1.0, end_lr=0.0):
    """optimization.py: polynomial decay from step 0, replaced by linear warmup while s < warmup."""
    decayed = (init_lr - end_lr) * (1.0 - min(step, train_steps) / train_steps) ** power + end_lr
    if warmup_steps:
        s = step - start_warmup_step
        if s < warmup_steps:
            return init_lr * s / warmup_steps
    return decayed


def np_lamb(init, grads, lrs, names, beta_1=0.9, beta_2=0.999, eps=1e-6, wd=0.01, decay_excluded=EXCLUDED,
            adaptation_excluded=None, clip=None):
    """lamb_optimizer_v1 in float64 after optional clip_by_global_norm; per-step list of weights."""
    adaptation_excluded = adaptation_excluded or decay_excluded
    ws = [np.asarray(x, np.float64) for x in init]
    ms = [np.zeros_like(w) for w in ws]
    vs = [np.zeros_like(w) for w in ws]
    history = []
    for t, (step_grads, lr) in enumerate(zip(grads, lrs), start=1):
        step_grads = [np.asarray(g, np.float64) for g in step_grads]
        if clip:
            global_norm = np.sqrt(sum((g * g).sum() for g in step_grads))
            step_grads = [g * clip / max(global_norm, clip) for g in step_grads]
        for i, g in enumerate(step_grads):
            ms[i] = beta_1 * ms[i] + (1 - beta_1) * g
            vs[i] = beta_2 * vs[i] + (1 - beta_2) * g * g
            u = (ms[i] / (1 - beta_1 ** t)) / (np.sqrt(vs[i] / (1 - beta_2 ** t)) + eps)
            if not any(p in names[i] for p in decay_excluded):
                u = u + wd * ws[i]
            ratio = 1.0
            if not any(p in names[i] for p in adaptation_excluded):
                w_norm, u_norm = np.linalg.norm(ws[i]), np.linalg.norm(u)
                if w_norm > 0 and u_norm > 0:
                    ratio = w_norm / u_norm
            ws[i] = ws[i] - ratio * lr * u
        history.append([w.copy() for w in ws])
    return history


# ---------------------------------------------------------------- problems

NAMES = ["bert/encoder/layer_0/attention/self/query/kernel",
         "bert/encoder/layer_0/attention/output/LayerNorm/gamma",
         "bert/encoder/layer_0/attention/self/query/bias",
         "cls/seq_relationship/output_weights",  # starts at zero: ‖w‖ = 0 on the first step
         "bert/pooler/dense/kernel"]  # zero gradient: u = wd·w alone
SHAPES = [(4, 3), (4,), (3,), (2, 4), (3, 3)]


def make_problem(steps=4, seed=0, grad_scale=1.0):
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(SHAPES[0]), 1.0 + 0.1 * rng.standard_normal(SHAPES[1]),
            0.1 * rng.standard_normal(SHAPES[2]), np.zeros(SHAPES[3]), rng.standard_normal(SHAPES[4])]
    grads = []
    for _ in range(steps):
        step = [grad_scale * rng.standard_normal(s) for s in SHAPES]
        step[4] = np.zeros(SHAPES[4])
        grads.append([g.astype(np.float32) for g in step])
    return [x.astype(np.float32) for x in init], grads


def make_variables(init, names=NAMES):
    return [tf.Variable(x, name=name) for x, name in zip(init, names)]


def run_tf(opt, init, grads, names=NAMES, wrap=None):
    variables = make_variables(init, names)

    def apply(step_grads):
        opt.apply_gradients(zip(step_grads, variables))

    apply = wrap(apply) if wrap else apply
    history = []
    for step_grads in grads:
        apply([tf.constant(g) for g in step_grads])
        history.append([v.numpy() for v in variables])
    return history


def assert_histories_close(got, want, names=NAMES):
    assert len(got) == len(want)
    for step, (g, w) in enumerate(zip(got, want)):
        for i, name in enumerate(names):
            np.testing.assert_allclose(g[i], w[i], rtol=RTOL, atol=ATOL, err_msg=f"{name} step {step}")


SCHEDULE = dict(init_lr=0.05, train_steps=10, warmup_steps=2, start_warmup_step=-1)


# ---------------------------------------------------------------- LAMB

@pytest.mark.parametrize("wrap", [None, tf.function], ids=["eager", "tf.function"])
def test_lamb_matches_numpy_over_several_steps(wrap):
    init, grads = make_problem()
    opt = optim.Lamb(optim.PolynomialWarmup(**SCHEDULE), weight_decay_rate=0.01, global_clipnorm=None)
    lrs = [np_schedule(s, **SCHEDULE) for s in range(len(grads))]
    assert lrs[0] == 0.025 and lrs[1] == pytest.approx(0.045)
    want = np_lamb(init, grads, lrs, NAMES)
    assert_histories_close(run_tf(opt, init, grads, wrap=wrap), want)
    assert int(opt.iterations.numpy()) == len(grads)


def test_lamb_under_xla_matches_numpy():
    # The GPU path: Keras compiles each update with XLA there, the suite's xla switch the whole step.
    init, grads = make_problem(steps=3)
    opt = optim.Lamb(optim.PolynomialWarmup(**SCHEDULE))
    lrs = [np_schedule(s, **SCHEDULE) for s in range(3)]
    got = run_tf(opt, init, grads, wrap=lambda f: tf.function(f, jit_compile=True))
    assert_histories_close(got, np_lamb(init, grads, lrs, NAMES, clip=1.0))


def test_numpy_lamb_comparison_can_fail():
    """The problem is sensitive to the exclusions, the trust ratio and the bias correction."""
    init, grads = make_problem()
    lrs = [0.05] * len(grads)
    got = run_tf(optim.Lamb(0.05, global_clipnorm=None), init, grads)
    assert_histories_close(got, np_lamb(init, grads, lrs, NAMES))
    for variant in (dict(decay_excluded=()), dict(adaptation_excluded=("nothing",)), dict(wd=0.0),
                    dict(beta_2=0.99)):
        other = np_lamb(init, grads, lrs, NAMES, **variant)
        assert not all(np.allclose(a, b, rtol=RTOL, atol=ATOL) for a, b in zip(got[-1], other[-1])), variant


def test_zero_norms_give_trust_ratio_one():
    init, grads = make_problem(steps=1)
    got = run_tf(optim.Lamb(0.1, global_clipnorm=None), init, grads)[0]
    # ‖w‖ = 0: the first update is lr·m̂/(√v̂+ε) = lr·g/(|g|+ε), nearly lr·sign(g).
    g = grads[0][3].astype(np.float64)
    np.testing.assert_allclose(got[3], -0.1 * g / (np.abs(g) + 1e-6), rtol=RTOL)
    # Zero gradient with weight decay: u = wd·w, so ratio·u = w·‖w‖/‖w‖ and w shrinks by lr·w.
    np.testing.assert_allclose(got[4], init[4] * (1 - 0.1), rtol=RTOL)


def test_zero_update_norm_leaves_the_variable_alone():
    names = ["bert/no_decay/kernel", "bert/x/kernel"]
    init = [np.ones((2, 3), np.float32), np.full((3,), 2.0, np.float32)]
    grads = [[np.zeros((2, 3), np.float32), np.ones((3,), np.float32)]] * 3
    # Excluded from weight decay but not from layer adaptation: ‖u‖ = 0 and ‖w‖ > 0.
    opt = optim.Lamb(0.1, exclude_from_weight_decay=EXCLUDED + ("no_decay",),
                     exclude_from_layer_adaptation=EXCLUDED, global_clipnorm=None)
    got = run_tf(opt, init, grads, names=names)
    np.testing.assert_array_equal(got[-1][0], init[0])
    assert opt.uses_layer_adaptation(tf.Variable(0.0, name="bert/no_decay/kernel"))
    want = np_lamb(init, grads, [0.1] * 3, names, decay_excluded=EXCLUDED + ("no_decay",),
                   adaptation_excluded=EXCLUDED)
    assert_histories_close(got, want, names)


def test_exclusions_match_the_keras_names_of_the_model():
    model = bert.build_pretraining_model(TINY, SEQ, PRED)
    opt = optim.Lamb(0.1)
    plain = {bert.tf1_name(v) for v in model.trainable_variables if opt.uses_weight_decay(v)}
    assert plain == {n for n in bert.tf1_shapes(TINY)
                     if n.endswith(("kernel", "embeddings", "output_weights"))}
    assert all(opt.uses_layer_adaptation(v) == opt.uses_weight_decay(v) for v in model.trainable_variables)


def test_global_norm_clipping_before_the_update():
    # Large gradients and a large epsilon, so that scaling the gradients changes the update.
    init, grads = make_problem(steps=3, grad_scale=30.0)
    lrs = [0.05] * 3
    clipped = run_tf(optim.Lamb(0.05, epsilon=0.5), init, grads)
    assert_histories_close(clipped, np_lamb(init, grads, lrs, NAMES, eps=0.5, clip=1.0))
    unclipped = run_tf(optim.Lamb(0.05, epsilon=0.5, global_clipnorm=None), init, grads)
    assert_histories_close(unclipped, np_lamb(init, grads, lrs, NAMES, eps=0.5))
    assert not np.allclose(clipped[-1][0], unclipped[-1][0], rtol=1e-3)
    assert optim.Lamb(0.1).global_clipnorm == 1.0


@pytest.mark.parametrize("wrap", [None, tf.function], ids=["eager", "tf.function"])
def test_under_loss_scale_optimizer(wrap):
    init, grads = make_problem(steps=3, grad_scale=3.0)
    variables = make_variables(init)
    opt = tf.keras.mixed_precision.LossScaleOptimizer(optim.Lamb(optim.PolynomialWarmup(**SCHEDULE)),
                                                      dynamic=False, initial_scale=1024.0)

    def step(step_grads):
        with tf.GradientTape() as tape:
            # d loss / d w = the step's gradient.
            loss = tf.add_n([tf.reduce_sum(g * v) for g, v in zip(step_grads, variables)])
            scaled = opt.get_scaled_loss(loss)
        scaled_grads = tape.gradient(scaled, variables)
        opt.apply_gradients(zip(opt.get_unscaled_gradients(scaled_grads), variables))

    step = wrap(step) if wrap else step
    got = []
    for step_grads in grads:
        step([tf.constant(g) for g in step_grads])
        got.append([v.numpy() for v in variables])
    lrs = [np_schedule(s, **SCHEDULE) for s in range(3)]
    assert_histories_close(got, np_lamb(init, grads, lrs, NAMES, clip=1.0))


def test_dynamic_loss_scale_skips_non_finite_steps():
    init, grads = make_problem(steps=1)
    variables = make_variables(init)
    opt = tf.keras.mixed_precision.LossScaleOptimizer(optim.Lamb(0.1))
    bad = [tf.constant(g) for g in grads[0]]
    bad[0] = tf.fill(SHAPES[0], np.float32(np.inf))
    opt.apply_gradients(zip(bad, variables))
    for before, variable in zip(init, variables):
        np.testing.assert_array_equal(variable.numpy(), before)
        for slot in opt.inner_optimizer.slots(variable):
            np.testing.assert_array_equal(slot.numpy(), 0.0)
    # Keras still counts the skipped step, so the schedule moves on; LAMB's t does not.
    assert int(opt.inner_optimizer.iterations.numpy()) == 1
    assert int(opt.inner_optimizer.applied_steps.numpy()) == 0


def non_finite(step_grads):
    bad = [tf.constant(g) for g in step_grads]
    bad[0] = tf.fill(SHAPES[0], np.float32(np.inf))
    return bad


@pytest.mark.parametrize("wrap", [None, tf.function], ids=["eager", "tf.function"])
def test_bias_correction_counts_only_applied_steps(wrap):
    """An overflow step skipped by the loss scaler must not advance LAMB's t (m and v did not move)."""
    init, grads = make_problem(steps=1)
    variables = make_variables(init)
    opt = tf.keras.mixed_precision.LossScaleOptimizer(optim.Lamb(0.1))

    def apply(step_grads):
        opt.apply_gradients(zip(step_grads, variables))

    apply = wrap(apply) if wrap else apply
    apply(non_finite(grads[0]))
    apply([tf.constant(g) for g in grads[0]])
    got = [v.numpy() for v in variables]
    # One applied update: bias correction with t = 1, whatever `iterations` says.
    assert_histories_close([got], np_lamb(init, grads, [0.1], NAMES, clip=1.0))
    assert int(opt.inner_optimizer.applied_steps.numpy()) == 1
    assert int(opt.iterations.numpy()) == 2


def test_applied_steps_are_broadcast_and_checkpointed(tmp_path):
    from suite.train.checkpoints import TrainingCheckpoints
    from suite.train.dist import optimizer_variables

    init, grads = make_problem(steps=3)

    def fresh():
        model = tf.Module()
        model.params = make_variables(init)
        return model, tf.keras.mixed_precision.LossScaleOptimizer(optim.Lamb(0.1))

    model, opt = fresh()
    opt.apply_gradients(zip(non_finite(grads[0]), model.params))
    opt.apply_gradients(zip([tf.constant(g) for g in grads[1]], model.params))
    counter = opt.inner_optimizer.applied_steps
    assert any(v is counter for v in optimizer_variables(opt))  # what broadcast_state sends
    prefix = TrainingCheckpoints(model, opt, str(tmp_path)).save(2)

    resumed_model, resumed = fresh()
    assert TrainingCheckpoints(resumed_model, resumed).restore(prefix) == 2
    assert int(resumed.inner_optimizer.applied_steps.numpy()) == 1
    assert int(resumed.iterations.numpy()) == 2
    for o, m in ((opt, model), (resumed, resumed_model)):
        o.apply_gradients(zip([tf.constant(g) for g in grads[2]], m.params))
    for a, b in zip(model.params, resumed_model.params):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_sparse_gradient_is_densified():
    rng = np.random.default_rng(1)
    init = rng.standard_normal((6, 3)).astype(np.float32)
    values = rng.standard_normal((2, 3)).astype(np.float32)
    dense = np.zeros((6, 3), np.float32)
    dense[[1, 4]] = values
    results = []
    sparse = tf.IndexedSlices(tf.constant(values), tf.constant([1, 4]), tf.constant([6, 3]))
    for grad in (sparse, tf.constant(dense)):
        variable = tf.Variable(init, name="bert/embeddings/word_embeddings")
        optim.Lamb(0.1).apply_gradients([(grad, variable)])
        results.append(variable.numpy())
    np.testing.assert_allclose(results[0], results[1], rtol=RTOL)
    assert not np.allclose(results[0], init)


def test_config_round_trip_keeps_the_updates():
    """Horovod's DistributedOptimizer rebuilds the optimizer from get_config()."""
    opt, _ = optim.build_optimizer(base_lr=0.05, train_steps=10, warmup_steps=2, start_warmup_step=-1,
                                   epsilon=1e-4, weight_decay=0.02)
    clone = optim.Lamb.from_config(opt.get_config())
    assert isinstance(clone._learning_rate, optim.PolynomialWarmup)
    assert clone.get_config() == opt.get_config()
    init, grads = make_problem(steps=2)
    assert_histories_close(run_tf(clone, init, grads), run_tf(opt, init, grads))


def test_keras_weight_decay_is_refused():
    with pytest.raises(ValueError, match="weight_decay_rate"):
        optim.Lamb(0.1, weight_decay=0.01)


def test_tiny_bert_trains_with_build_optimizer():
    tf.random.set_seed(0)
    model = bert.build_pretraining_model(TINY, SEQ, PRED)
    opt, _ = optim.build_optimizer(base_lr=0.1, train_steps=20)
    features, labels = random_features(TINY), random_labels(TINY)

    def step():  # eager: tracing the model and 46 updates would take longer than the steps
        with tf.GradientTape() as tape:
            loss = bert.pretraining_loss(*model(features, training=False), labels)
        opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    losses = [float(step()) for _ in range(6)]
    assert losses[-1] < 0.8 * losses[0]
    # iterations, m and v, applied_steps
    assert len(opt.variables) == 2 + 2 * len(model.trainable_variables)


# ---------------------------------------------------------------- schedule

@pytest.mark.parametrize("args,steps", [
    (dict(init_lr=0.004, train_steps=100), [0, 1, 50, 99, 100, 101, 1000]),
    (dict(init_lr=0.004, train_steps=100, warmup_steps=10), [0, 1, 9, 10, 11, 99, 100, 150]),
    (dict(init_lr=0.004, train_steps=100, warmup_steps=10, start_warmup_step=-3), [0, 6, 7, 8, 100]),
    (dict(init_lr=0.004, train_steps=100, warmup_steps=10, start_warmup_step=4), [0, 3, 4, 13, 14, 100]),
    (dict(init_lr=0.002, train_steps=1141, warmup_steps=100, power=1.0), [0, 99, 100, 1141]),
])
def test_schedule_matches_the_reference_at_boundaries(args, steps):
    schedule = optim.PolynomialWarmup(**args)
    for step in steps:
        for typed in (step, tf.constant(step, tf.int64), tf.constant(step, tf.float32)):
            want = np_schedule(step, **args)
            assert float(schedule(typed)) == pytest.approx(want, rel=1e-6, abs=1e-12), step


def test_schedule_boundary_values():
    lr = optim.PolynomialWarmup(0.004, 100, warmup_steps=10)
    assert float(lr(0)) == 0.0
    assert float(lr(9)) == pytest.approx(0.004 * 0.9)
    assert float(lr(10)) == pytest.approx(0.004 * 0.9)  # decay counted from step 0, not from warmup's end
    assert float(lr(100)) == 0.0 and float(lr(500)) == 0.0
    # A positive start_warmup_step gives negative rates before it, exactly as the reference does.
    late = optim.PolynomialWarmup(0.004, 100, warmup_steps=10, start_warmup_step=4)
    assert float(late(0)) == pytest.approx(-0.0016)
    assert float(optim.PolynomialWarmup(0.004, 100)(0)) == pytest.approx(0.004)


def test_schedule_config_and_alias():
    schedule = optim.BertSchedule(0.004, 100, warmup_steps=10, start_warmup_step=-3)
    assert optim.BertSchedule is optim.PolynomialWarmup
    clone = optim.PolynomialWarmup.from_config(schedule.get_config())
    assert [float(clone(s)) for s in range(0, 120, 7)] == [float(schedule(s)) for s in range(0, 120, 7)]
    assert schedule.get_config()["start_warmup_step"] == -3
    with pytest.raises(ValueError, match="train_steps"):
        optim.PolynomialWarmup(0.004, 0)
    with pytest.raises(ValueError, match="warmup_steps"):
        optim.PolynomialWarmup(0.004, 10, warmup_steps=-1)


# ---------------------------------------------------------------- build, log keys, rules

def test_build_optimizer_defaults_are_the_reference():
    opt, schedule = optim.build_optimizer(base_lr=0.000425, train_steps=6700)
    assert isinstance(opt, optim.Lamb) and opt._learning_rate is schedule
    assert (opt.beta_1, opt.beta_2, opt.epsilon, opt.weight_decay_rate) == (0.9, 0.999, 1e-6, 0.01)
    assert opt.global_clipnorm == 1.0
    assert opt.weight_decay_exclusions == opt.layer_adaptation_exclusions == EXCLUDED
    assert schedule.get_config() == {"init_lr": 0.000425, "train_steps": 6700, "warmup_steps": 0,
                                     "start_warmup_step": 0, "power": 1.0, "end_lr": 0.0, "name": None}
    assert optim.build_optimizer(base_lr=1e-3, train_steps=10, clip_norm=None)[0].global_clipnorm is None


def test_mlperf_hyperparameters():
    keys = optim.mlperf_hyperparameters(base_lr=0.000425, train_steps=6700, warmup_steps=0,
                                        start_warmup_step=0, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                                        weight_decay=0.01)
    assert keys == {
        "opt_name": "lamb", "opt_base_learning_rate": 0.000425, "opt_learning_rate_training_steps": 6700,
        "opt_learning_rate_warmup_steps": 0, "num_warmup_steps": 0, "start_warmup_step": 0,
        "opt_lamb_beta_1": 0.9, "opt_lamb_beta_2": 0.999, "opt_lamb_weight_decay_rate": 0.01,
        "opt_epsilon": 1e-6, "opt_lamb_epsilon": 1e-6, "opt_lamb_learning_rate_decay_poly_power": 1.0}
    negative = optim.mlperf_hyperparameters(base_lr=0.0033, train_steps=470, warmup_steps=290,
                                            start_warmup_step=-100, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                                            weight_decay=0.01)
    assert negative["start_warmup_step"] == -100 and negative["num_warmup_steps"] == 290


def test_closed_rule_violations():
    assert optim.closed_rule_violations() == []
    assert optim.closed_rule_violations(power=1.0, end_lr=0.0, clip_norm=1.0,
                                        exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"]) == []
    violations = optim.closed_rule_violations(power=0.5, end_lr=1e-4, clip_norm=None,
                                              exclude_from_layer_adaptation=["None"])
    assert violations == [
        "lamb polynomial decay power 0.5 is not 1.0",
        "lamb end learning rate 0.0001 is not 0.0",
        "gradient clip norm None is not 1.0",
        "layer-adaptation exclusions ['None'] are not ['LayerNorm', 'layer_norm', 'bias']",
    ]
    assert optim.closed_rule_violations(exclude_from_weight_decay=["bias"]) == [
        "weight-decay exclusions ['bias'] are not ['LayerNorm', 'layer_norm', 'bias']",
        "layer-adaptation exclusions ['bias'] are not ['LayerNorm', 'layer_norm', 'bias']",
    ]
