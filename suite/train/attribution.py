"""Scaling-loss attribution: where each training step's time goes, per rank and for the job.

The step splits into four parts that add up to the measured step time:

- input wait: the rank's wait for its next batch (StepTimer's data wait);
- exposed allreduce: from the moment the last rank has submitted its last gradient to the end of the
  step's last allreduce: the communication not hidden behind the slowest rank's backward pass;
- rank imbalance: how long the first rank ready waited for the last one (measured on the step's last
  gradient to become ready): what the step would gain if every rank were as fast as the fastest;
- compute: the rest (forward, backward, the optimizer's apply, Horovod's negotiation cycles).

Step time and input wait come from every rank's StepTimer (the steady intervals behind the run's
throughput). Exposed allreduce and imbalance come from Horovod's timeline, recorded by rank 0 for a
few steady steps (the window: the second timing interval, at most WINDOW_STEPS steps) with
hvd.start_timeline / hvd.stop_timeline, which need HOROVOD_TIMELINE=DYNAMIC before hvd.init.

What the timeline can tell (horovod/common/controller.cc, timeline.cc, v0.28.1): a tensor's first
negotiation goes through the coordinator, which marks each rank's request as it arrives; once the
tensor's response is cached (every later step, with Horovod's default response cache), the ranks
agree with one bitwise allreduce per cycle and the timeline marks only when the first rank and when
the last rank had the tensor ready, not which rank was which. So the job's imbalance is always
measured, but a rank's own wait (and so its own compute) only where the timeline names the ranks.
Readiness is seen once per Horovod cycle (HOROVOD_CYCLE_TIME: Horovod's 1 ms on GPUs, the suite's
20 ms on CPUs, whose steps take seconds).

This module imports neither TensorFlow nor Horovod at the top: the arithmetic is plain Python.
"""
import json
import os
import time
from dataclasses import dataclass, field

TIMELINE_VARIABLE = "HOROVOD_TIMELINE"
DYNAMIC = "DYNAMIC"
TIMELINE_FILE = "attribution_timeline.json"
WINDOW_STEPS = 10
# The Horovod operations that carry gradients, and the activities inside one that wait for a GPU's
# data (the request reaches Horovod when the op is enqueued, before the GPU has computed the tensor).
GRADIENT_OPS = ("ALLREDUCE", "ADASUM")
DATA_WAITS = ("WAIT_FOR_DATA", "WAIT_FOR_OTHER_TENSOR_DATA")
# Launcher variables that give the process count before Horovod starts.
# (srun's per-step count: an sbatch script's own SLURM_NTASKS is there for a lone process too.)
SIZE_VARIABLES = ("HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS")


class TimelineError(ValueError):
    """A timeline file that is not a Horovod timeline."""


# ---- before hvd.init ----

def enable_timeline(env=None, gpu=True):
    """Lets rank 0 record a window of Horovod's timeline later: HOROVOD_TIMELINE=DYNAMIC if unset.

    Only for a job of more than one process (one rank negotiates nothing), and by default only on
    GPUs: an enabled timeline keeps a writer thread spinning on rank 0 for the whole run (Horovod's
    TimelineWriter::WriterLoop polls its queue with a bare yield), which on a CPU host takes a core
    from the kernels. Measured on 2 CPU ranks: BENCHMARKS.md, "Horovod and thread settings on a CPU".
    A GPU rank has cores to spare (16 per GPU on a BM.GPU.GM4.8). On a CPU, set
    HOROVOD_TIMELINE=DYNAMIC yourself to get the split at that price. A user's own HOROVOD_TIMELINE
    (a file, as the launchers' --timeline and a profile's `timeline: true` set it) is left alone; the
    window is then read from that file.
    """
    env = os.environ if env is None else env
    sizes = [env[key] for key in SIZE_VARIABLES if env.get(key, "").isdigit()]
    if gpu and sizes and int(sizes[0]) > 1:
        env.setdefault(TIMELINE_VARIABLE, DYNAMIC)


# ---- the window, inside the step loop ----

class Window:
    """Rank 0 records Horovod's timeline over a few steady steps; the other ranks only count them.

    The loop calls before_step() before fetching a batch, after_step(interval) once the step's
    timer has ticked (before any other collective), and stop() before an evaluation. Recording
    starts at the first step after the first timing interval (tracing, warm-up) has closed and stops
    after WINDOW_STEPS steps or when the next interval closes, so that the only collectives inside
    the window are the steps' gradients.
    """

    def __init__(self, world, timer, run_dir, steps=WINDOW_STEPS, env=None, horovod=None):
        self._world, self._timer, self._steps_max = world, timer, steps
        self._env = os.environ if env is None else env
        self._hvd = horovod
        self._path = os.path.join(run_dir, TIMELINE_FILE) if run_dir else None
        self._state = "waiting"
        self._record = {"recorded": False, "reason": self._cannot_record()}
        self._steps = 0

    def _cannot_record(self):
        if self._world.size == 1:
            return "one rank: nothing is negotiated or reduced"
        if getattr(self._world, "distribution", "horovod") != "horovod":
            return f"the {self._world.distribution} backend keeps no Horovod timeline"
        setting = self._env.get(TIMELINE_VARIABLE)
        if not setting:
            return f"{TIMELINE_VARIABLE} was not set before Horovod started"
        if setting == DYNAMIC and not self._path:
            return "no run directory to write the timeline to"
        return None

    def before_step(self):
        if self._state != "waiting" or not self._timer.intervals or self._record["reason"]:
            return
        self._state, self._steps = "recording", 0
        self._record.update(after_timed_steps=sum(i["steps"] for i in self._timer.intervals),
                            started_epoch_s=time.time())
        if self._world.is_root and self._env[TIMELINE_VARIABLE] == DYNAMIC:
            try:
                # Horovod: only the coordinator writes the timeline; on other ranks the call does nothing.
                self._horovod().start_timeline(self._path, mark_cycles=False)
            except ValueError as err:  # HOROVOD_TIMELINE=DYNAMIC came after hvd.init
                self._state, self._record["reason"] = "done", f"Horovod refused the timeline: {err}"

    def after_step(self, interval):
        if self._state != "recording":
            return
        self._steps += 1
        if self._steps >= self._steps_max or interval:
            self.stop()

    def stop(self):
        if self._state != "recording":
            return
        own_file = self._env[TIMELINE_VARIABLE] == DYNAMIC
        if self._world.is_root and own_file:
            self._horovod().stop_timeline()  # returns once the file is written and closed
        self._state = "done"
        self._record.update(recorded=True, steps=self._steps, stopped_epoch_s=time.time(),
                            path=self._path if own_file else self._env[TIMELINE_VARIABLE],
                            own_file=own_file)

    def record(self):
        """What the summary needs: where the timeline is and which steps it covers, or why there is none."""
        if self._state == "waiting" and not self._record["reason"]:
            return {**self._record, "reason": "the run had no step after its first timing interval "
                                              "(tracing and warm-up)"}
        return dict(self._record)

    def _horovod(self):
        if self._hvd is None:
            import horovod.tensorflow as hvd
            self._hvd = hvd
        return self._hvd


# ---- reading a timeline ----

def read_events(path, window_us=None):
    """The events of a Horovod timeline file; with window_us=(start, stop), only those in between.

    Reading stops at the first event past the window, so a whole run's timeline is read only up to
    it. Metadata records (tensor names, the start time) are always kept.
    """
    events = []
    for event in _events_in(path):
        timed = event.get("ph") != "M"
        if window_us and timed and event.get("ts", 0) > window_us[1]:
            break
        if not (window_us and timed and event.get("ts", 0) < window_us[0]):
            events.append(event)
    return events


def _events_in(path):
    """Yields a timeline's records one by one, as far as they are complete.

    Horovod keeps the file valid JSON after each event, but a file still being written can end in
    half an event or without its closing bracket: what is complete is read, the rest left.
    """
    decoder = json.JSONDecoder()
    text = ""
    with open(path) as handle:
        for chunk in iter(lambda: handle.read(1 << 20), ""):
            text += chunk
            position = 0
            while True:
                position = _skip_separators(text, position)
                try:
                    event, position = decoder.raw_decode(text, position)
                except json.JSONDecodeError:
                    break  # half an event, or the closing bracket: read on
                if not isinstance(event, dict):
                    raise TimelineError(f"{path}: not a Horovod timeline (an entry is not an object)")
                yield event
            text = text[position:]


def _skip_separators(text, position):
    while position < len(text) and (text[position].isspace() or text[position] in "[,"):
        position += 1
    return position


def epoch_origin_us(path):
    """The wall-clock time (µs since the epoch) of the timeline's ts 0, from its first record."""
    for event in _events_in(path):
        origin = (event.get("args") or {}).get("start_time_since_epoch_in_micros")
        if origin is not None or event.get("ph") != "M":
            return origin
    return None


@dataclass
class Occurrence:
    """One tensor's negotiation and allreduce in one step; times in µs on the timeline's clock."""

    tensor: str
    first_ready: float      # the first rank's request (negotiation begins)
    last_ready: float       # the last rank's (negotiation ends)
    end: float              # the allreduce ends
    data_ready: float       # last_ready, or later where rank 0 still waited for its GPU's data
    ranks: dict = field(default_factory=dict)  # {rank: µs} where the timeline names each rank


def occurrences(events):
    """(complete occurrences in file order, names whose spans were cut at the window's start)."""
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name" and "name" in (e.get("args") or {})}
    spans, negotiated, found, cut = {}, {}, [], set()
    for event in events:
        pid, phase = event.get("pid"), event.get("ph")
        if pid not in names or phase not in ("B", "E", "X"):
            continue
        stack = spans.setdefault(pid, [])
        if phase == "B":
            stack.append({"name": event.get("name", ""), "ts": event["ts"], "ranks": {}, "waited": None})
        elif phase == "X":
            if stack and stack[-1]["name"].startswith("NEGOTIATE_") and str(event.get("name", "")).isdigit():
                stack[-1]["ranks"][int(event["name"])] = event["ts"]
        elif not stack:
            if not any(o.tensor == names[pid] for o in found):
                cut.add(names[pid])  # its beginning came before the window
        else:
            span = stack.pop()
            _close(span, event["ts"], stack, pid, names[pid], negotiated, found)
    return found, cut


def _close(span, ts, stack, pid, name, negotiated, found):
    if span["name"].startswith("NEGOTIATE_"):
        negotiated[pid] = (span["ts"], ts, span["ranks"])
    elif span["name"] in DATA_WAITS and stack:
        stack[0]["waited"] = max(stack[0]["waited"] or ts, ts)
    elif not stack and span["name"] in GRADIENT_OPS and pid in negotiated:
        first, last, ranks = negotiated.pop(pid)
        found.append(Occurrence(name, first, last, ts, max(last, span["waited"] or last), ranks))


def group_steps(found, cut=()):
    """The window's complete steps: lists of occurrences holding every tensor once, in step order.

    Every step submits the same tensors, so a tensor's k-th occurrence belongs to the k-th step,
    one later for a tensor whose first occurrence began before the window (cut). A step missing a
    tensor (at either edge of the window) is left out, and so is any step whose time span overlaps
    another's: a rank computes the next step's gradients only once this step's allreduces are done,
    so steps never overlap, and a grouping that makes them overlap cannot be right.
    """
    by_tensor = {}
    for occurrence in sorted(found, key=lambda o: o.first_ready):
        by_tensor.setdefault(occurrence.tensor, []).append(occurrence)
    steps = {}
    for tensor, found_for_tensor in by_tensor.items():
        offset = 1 if tensor in cut else 0
        for index, occurrence in enumerate(found_for_tensor):
            steps.setdefault(index + offset, []).append(occurrence)
    spans = {k: (min(o.first_ready for o in step), max(o.end for o in step)) for k, step in steps.items()}

    def alone(k):
        return all(spans[j][1] < spans[k][0] or spans[j][0] > spans[k][1] for j in spans if j != k)

    return [steps[k] for k in sorted(steps) if len(steps[k]) == len(by_tensor) and alone(k)]


@dataclass(frozen=True)
class StepSplit:
    """One step's communication-side parts, in µs."""

    exposed: float           # the last allreduce's end minus the moment every gradient was ready
    imbalance: float         # the first rank ready's wait for the last, on the last gradient
    waits: dict = None       # {rank: its wait on that gradient} where the timeline names the ranks


def split_step(step):
    data_ready = max(o.data_ready for o in step)
    last = max(step, key=lambda o: o.last_ready)
    waits = {rank: last.last_ready - ts for rank, ts in sorted(last.ranks.items())} or None
    return StepSplit(exposed=max(0.0, max(o.end for o in step) - data_ready),
                     imbalance=last.last_ready - last.first_ready, waits=waits)


def window_splits(events, world_size):
    """(per-step splits, None) for a window's events, or ([], why none could be made)."""
    found, cut = occurrences(events)
    if not found:
        return [], "the timeline window holds no complete allreduce"
    steps = group_steps(found, cut)
    if not steps:
        return [], "the timeline window holds no complete step (every tensor once)"
    splits = [split_step(step) for step in steps]
    if any(s.waits is not None and len(s.waits) != world_size for s in splits):
        splits = [StepSplit(s.exposed, s.imbalance) for s in splits]
    return splits, None


# ---- the summary.json record ----

def summarize(window, ranks, world_size):
    """attribute(), or a record saying why not: the run is over, and its analysis must not fail it."""
    try:
        return attribute(window, ranks, world_size)
    except Exception as err:  # noqa: BLE001 - reported in summary.json instead
        return {"method": "none", "reason": f"attribution failed: {type(err).__name__}: {err}"}


def attribute(window, ranks, world_size):
    """summary.json's "attribution": the four parts per rank and for the job, in ms per step.

    window: Window.record() of rank 0; ranks: every rank's StepTimer.summary(), in rank order.
    """
    per_rank = [_timed(rank) for rank in ranks]
    if any(r is None for r in per_rank):
        return {"method": "none", "reason": "a rank timed no step"}
    if world_size == 1:
        record = {"method": "one rank: no allreduce or imbalance by definition"}
        return {**record, **_parts(per_rank, [StepSplit(0.0, 0.0, {0: 0.0})])}
    splits, why = _read_window(window, world_size) if window.get("recorded") else \
        ([], window.get("reason") or "no timeline window was recorded")
    record = {"method": "horovod timeline window", "window": _window_fields(window)}
    if why:
        record.update(method="none", reason=f"no timeline split: {why}")
    else:
        record["window"]["steps_split"] = len(splits)
    return {**record, **_parts(per_rank, splits)}


def _timed(rank):
    """(step ms, input wait ms) from one rank's timer summary, or None."""
    if not rank.get("step_ms_mean"):
        return None
    return rank["step_ms_mean"], rank["step_ms_mean"] * rank.get("data_wait_fraction", 0.0)


def _window_fields(window):
    keys = ("after_timed_steps", "steps", "path", "own_file")
    return {key: window[key] for key in keys if key in window}


def _read_window(window, world_size):
    path = window["path"]
    bounds = None
    try:
        if not window.get("own_file"):
            # A whole run's timeline: only the events between the window's start and stop.
            origin = epoch_origin_us(path)
            if origin is None:
                return [], f"{path} has no start time to place the window in"
            bounds = (window["started_epoch_s"] * 1e6 - origin, window["stopped_epoch_s"] * 1e6 - origin)
        return window_splits(read_events(path, bounds), world_size)
    except (OSError, TimelineError) as err:
        return [], f"cannot read {path}: {getattr(err, 'strerror', None) or err}"


def _parts(per_rank, splits):
    """The four parts (ms) per rank and for the job; None where the timeline did not measure them."""
    exposed = _mean([s.exposed for s in splits]) / 1000 if splits else None
    imbalance = _mean([s.imbalance for s in splits]) / 1000 if splits else None
    waits = [s.waits for s in splits]
    rows = []
    for rank, (step_ms, wait_ms) in enumerate(per_rank):
        own = _mean([w[rank] for w in waits]) / 1000 if splits and all(waits) else None
        rows.append({"rank": rank, "step_ms": step_ms, "input_wait_ms": wait_ms,
                     "exposed_allreduce_ms": exposed, "imbalance_ms": own,
                     "compute_ms": _rest(step_ms, wait_ms, exposed, own)})
    step_ms = _mean([r["step_ms"] for r in rows])
    wait_ms = _mean([r["input_wait_ms"] for r in rows])
    return {"step_ms": step_ms, "compute_ms": _rest(step_ms, wait_ms, exposed, imbalance),
            "exposed_allreduce_ms": exposed, "input_wait_ms": wait_ms, "imbalance_ms": imbalance,
            "ranks": rows}


def _rest(step_ms, wait_ms, exposed, imbalance):
    if exposed is None or imbalance is None:
        return None
    return step_ms - wait_ms - exposed - imbalance


def _mean(values):
    return sum(values) / len(values)
