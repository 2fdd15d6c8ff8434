"""The suite's own training checkpoints: model, optimizer and step, saved at evaluations, resumed."""
import os

import suite  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)

import tensorflow as tf


class TrainingCheckpoints:
    """tf.train checkpoints of one run: written by rank 0, read by every rank on resume.

    Every rank restores the same files (a shared file system on multi-node jobs), because the
    first train step runs before the Horovod broadcast: all ranks must start it from the same state.
    """

    def __init__(self, model, optimizer, directory=None, keep=2):
        self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="suite_step")
        self.optimizer = optimizer
        self.model = model
        self._checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=self.step)
        self._manager = (tf.train.CheckpointManager(self._checkpoint, directory, max_to_keep=keep)
                         if directory else None)

    def save(self, step):
        """Writes the state after `step` optimizer steps; returns the checkpoint prefix."""
        self.step.assign(step)
        return self._manager.save(checkpoint_number=step)

    def restore(self, path):
        """Loads a checkpoint (a prefix, or a directory holding one); returns the steps it had trained."""
        prefix = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
        if not prefix or not tf.io.gfile.exists(prefix + ".index"):
            raise ValueError(f"resume_from {path}: no suite checkpoint found there")
        # Slots exist only once the optimizer is built; build it so they are restored, not deferred.
        _build_optimizer(self.optimizer, self.model.trainable_variables)
        try:
            status = self._checkpoint.restore(prefix)
            status.expect_partial()  # save_counter and the like are not part of the run's state
            status.assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.OpError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ValueError(f"resume_from {prefix}: does not match this model/optimizer ({first})") from None
        return int(self.step.numpy())


def _build_optimizer(optimizer, variables):
    inner = getattr(optimizer, "inner_optimizer", None)
    for candidate in (optimizer, inner):
        if candidate is not None and hasattr(candidate, "build"):
            candidate.build(variables)


def blocks_after(blocks, steps_done):
    """The blocks still to run once `steps_done` optimizer steps are behind (a block boundary)."""
    boundary = 0
    for index, block in enumerate(blocks):
        if boundary == steps_done:
            return list(blocks[index:])
        boundary += block.steps
    if boundary == steps_done:
        return []
    raise ValueError(f"resume_from: the checkpoint is at step {steps_done}, which is not an evaluation "
                     f"boundary of this run's plan")
