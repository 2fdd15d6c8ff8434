"""TF1 name-based BERT checkpoints (the MLPerf phase-1 model.ckpt-28252): check, load into Keras, write."""
import glob
import os

import numpy as np

import suite  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)
import tensorflow as tf

from models.bert import model as bert_model

# How many culprits a one-line error names before "...".
_SHOWN = 3


class CheckpointMismatch(ValueError):
    """The checkpoint cannot initialise the model: unreadable, or variables missing or mis-shaped."""


def expected_shapes(bert_config) -> dict[str, tuple]:
    """{TF1 name: shape} of the trainable variables a checkpoint must hold for this config."""
    return bert_model.tf1_shapes(bert_config)


def resolve_prefix(path) -> str:
    """A checkpoint prefix from a prefix, a .index/.data file, or a directory holding one checkpoint."""
    path = os.fspath(path)
    if os.path.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest:
            return latest
        indexes = sorted(glob.glob(os.path.join(path, "*.index")))
        if len(indexes) != 1:
            found = f"{len(indexes)} *.index files and no 'checkpoint' file" if indexes else "no *.index file"
            raise CheckpointMismatch(f"{path}: no single checkpoint in this directory ({found})")
        return indexes[0][:-len(".index")]
    for suffix in (".index", ".meta"):
        if path.endswith(suffix):
            return path[:-len(suffix)]
    if ".data-" in os.path.basename(path):
        return path[:path.rindex(".data-")]
    return path


def _read_shapes(path):
    """(prefix, reader, {name: shape}); CheckpointMismatch naming the path if it cannot be read."""
    prefix = resolve_prefix(path)
    try:
        reader = tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as err:
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointMismatch(f"{prefix}: cannot read the checkpoint: {message}") from None
    shapes = {name: tuple(shape) for name, shape in reader.get_variable_to_shape_map().items()}
    return prefix, reader, shapes


def _mismatches(expected: dict, found: dict) -> list[str]:
    """One entry per expected variable that is missing or has another shape; extra names are fine."""
    culprits = []
    for name, shape in expected.items():
        if name not in found:
            culprits.append(f"{name} (missing)")
        elif tuple(found[name]) != tuple(shape):
            culprits.append(f"{name} (expected {_shape(shape)}, found {_shape(found[name])})")
    return culprits


def _shape(shape):
    return "[" + ",".join(str(d) for d in shape) + "]"


def _summary(prefix, culprits):
    shown = ", ".join(culprits[:_SHOWN]) + (", ..." if len(culprits) > _SHOWN else "")
    return f"{prefix}: {len(culprits)} variables missing or mis-shaped: {shown}"


def checkpoint_problems(ckpt_prefix, bert_config) -> list[str]:
    """What stops this checkpoint from initialising a model of this config; empty when nothing does.

    One entry per missing or mis-shaped trainable variable. Extra variables (LAMB or Adam
    slots, global_step) are fine. An unreadable checkpoint is one entry naming the path.
    """
    try:
        prefix, _, found = _read_shapes(ckpt_prefix)
    except CheckpointMismatch as err:
        return [str(err)]
    return [f"{prefix}: {culprit}" for culprit in _mismatches(expected_shapes(bert_config), found)]


def load_tf1_checkpoint(model, ckpt_prefix) -> int:
    """Assigns every trainable variable of `model` from the checkpoint by TF1 name; returns how many.

    As the reference's init_checkpoint, only trainable variables are read (no optimizer
    slots, no global_step). Raises CheckpointMismatch, one line naming the checkpoint, if
    any is missing or mis-shaped; then no variable has been changed.
    """
    variables = bert_model.tf1_variables(model)
    prefix, reader, found = _read_shapes(ckpt_prefix)
    culprits = _mismatches({name: tuple(v.shape) for name, v in variables.items()}, found)
    if culprits:
        raise CheckpointMismatch(_summary(prefix, culprits))
    for name, variable in variables.items():
        variable.assign(tf.cast(reader.get_tensor(name), variable.dtype))
    return len(variables)


def model_values(model) -> dict[str, np.ndarray]:
    """{TF1 name: value} of the model's trainable variables."""
    return {name: variable.numpy() for name, variable in bert_model.tf1_variables(model).items()}


def write_tf1_checkpoint(values: dict, ckpt_prefix, extra: dict | None = None) -> str:
    """Writes a TF1-format name-based checkpoint (prefix.index, prefix.data-00000-of-00001).

    `values` and `extra` map TF1 names to arrays (extra: e.g. LAMB slots, global_step). Also
    writes the directory's `checkpoint` state file, as a TF1 Saver does, so the directory
    itself can be given to load_tf1_checkpoint. Returns the prefix.
    """
    tensors = {**values, **(extra or {})}
    names = sorted(tensors)
    prefix = os.fspath(ckpt_prefix)
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    # SaveV2 is the op a TF1 Saver runs; in eager mode it writes the files directly.
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.convert_to_tensor(np.asarray(tensors[name])) for name in names])
    _write_state_file(prefix)
    return prefix


def _write_state_file(prefix):
    """The `checkpoint` text proto a TF1 Saver keeps next to its checkpoints (relative path)."""
    name = os.path.basename(prefix).replace("\\", "\\\\").replace('"', '\\"')
    with open(os.path.join(os.path.dirname(os.path.abspath(prefix)), "checkpoint"), "w") as handle:
        handle.write(f'model_checkpoint_path: "{name}"\nall_model_checkpoint_paths: "{name}"\n')
