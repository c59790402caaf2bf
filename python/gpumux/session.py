"""gpumux.Session: one training job's link to the node coordinator (docs/COORDINATOR.md).

Threads: the training thread calls step(), data(), batch_size, set_running_batch() and
record(); none of them touches the network, takes a lock or waits (a step appends one tuple to
a bounded deque). A daemon thread registers, sends the recorded steps every report_every_s
(POST /v1/report), reads the batch size the coordinator wants, registers again after a 404,
backs off (1 s doubling to 30 s) while the coordinator is unreachable, and on close() sends the
last steps and leaves. Everything the background thread learns is published by plain
attribute assignment (atomic under the GIL).
"""
import atexit
import collections
import http.client
import logging
import os
import socket
import threading
import time

from .transport import Endpoint

_log = logging.getLogger("gpumux")
_perf = time.perf_counter

MAX_STEPS_PER_REPORT = 10000  # the protocol's bound; older steps are dropped beyond it
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 30.0


def default_job_id():
    """GPUMUX_POD/GPUMUX_CONTAINER (set by the device plugin), else host/<hostname>/<pid>."""
    pod, container = os.environ.get("GPUMUX_POD", ""), os.environ.get("GPUMUX_CONTAINER", "")
    if pod and container:
        return pod + "/" + container
    return "host/%s/%d" % (socket.gethostname(), os.getpid())


def default_gpus():
    """GPUMUX_GPU_UUIDS, else NVIDIA_VISIBLE_DEVICES when every entry is a GPU/MIG UUID."""
    uuids = [u.strip() for u in os.environ.get("GPUMUX_GPU_UUIDS", "").split(",") if u.strip()]
    if uuids:
        return uuids
    visible = [u.strip() for u in os.environ.get("NVIDIA_VISIBLE_DEVICES", "").split(",")
               if u.strip()]
    if visible and all(u.startswith(("GPU-", "MIG-")) for u in visible):
        return visible
    return []


def default_memory_mib():
    """GPUMUX_GPU_MEM_MIB (the grant's GPU memory, set by the device plugin), else 0."""
    mem = os.environ.get("GPUMUX_GPU_MEM_MIB", "").strip()
    return int(mem) if mem.isdigit() else 0


def _disabled_by_env():
    return os.environ.get("GPUMUX_DISABLE", "").strip().lower() in ("1", "true", "yes", "on")


def _positive_int(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


class _Step:
    __slots__ = ("_session", "_start")

    def __init__(self, session):
        self._session = session

    def __enter__(self):
        self._start = _perf()
        return self

    def __exit__(self, exc_type, exc, tb):
        seconds = _perf() - self._start
        s = self._session
        s.last_data_s, s._data_s = s._data_s, 0.0
        if exc_type is None:  # a failed step (an OOM at a new size, say) measures nothing
            s.last_step_s = seconds
            s.steps += 1
            if s._queue is not None:
                s._queue.append((s._running_batch, seconds))
        return False


class _Data:
    __slots__ = ("_session", "_start")

    def __init__(self, session):
        self._session = session

    def __enter__(self):
        self._start = _perf()
        return self

    def __exit__(self, exc_type, exc, tb):
        self._session._data_s += _perf() - self._start
        return False


class Session:
    """One training job's connection to the node coordinator.

    Session(job_class, batch_size, *, min_batch=0, max_batch=0, ...) starts at once and never
    raises for anything the network or the coordinator does. batch_size is the job's batch size
    now; `session.batch_size` is the one it should use (the coordinator's word once it has
    answered). One training thread per session: step() and data() are not re-entrant.
    """

    def __init__(self, job_class, batch_size, *, min_batch=0, max_batch=0, noise_scale=0.0,
                 job_id=None, gpus=None, memory_mib=None, coordinator=None, enabled=None,
                 timeout_s=2.0, retry_first_s=RETRY_FIRST_S, retry_max_s=RETRY_MAX_S):
        if not _positive_int(batch_size):
            raise ValueError("batch_size must be an integer >= 1, not %r" % (batch_size,))
        if not isinstance(job_class, str) or not job_class:
            raise ValueError("job_class must be a non-empty string")
        self.job_class = job_class
        self.job_id = job_id or default_job_id()
        self.gpus = list(gpus) if gpus is not None else default_gpus()
        self.min_batch, self.max_batch = int(min_batch or 0), int(max_batch or 0)
        self.memory_mib = int(memory_mib) if memory_mib is not None else default_memory_mib()
        self.noise_scale = float(noise_scale)
        self.report_every_s = 1.0
        self.state = "unregistered"  # the job's GPU's state, as the coordinator last said
        self.last_error = None       # why the last exchange failed (None after a success)
        self.steps = 0               # steps recorded (successful ones)
        self.last_step_s = 0.0       # the last step's wall time
        self.last_data_s = 0.0       # data() time since the step before it
        self._target = int(batch_size)
        self._running_batch = int(batch_size)
        self._data_s = 0.0
        self._queue = None
        self._registered = False
        self._stop = threading.Event()
        self._closed = False
        self._thread = None
        self._pid = os.getpid()
        self._retry_first_s, self._retry_max_s = retry_first_s, retry_max_s
        self._retry_s = 0.0
        self._down = False       # an outage was logged and has not ended
        self._complained = set()  # kinds of coordinator misbehaviour already logged

        self.enabled = not _disabled_by_env() if enabled is None else bool(enabled)
        if not self.enabled:
            return
        url = coordinator if coordinator is not None else os.environ.get("GPUMUX_COORDINATOR")
        try:
            self._endpoint = Endpoint(url or None, timeout_s)
        except ValueError as e:
            _log.warning("gpumux: %s; training runs without the coordinator", e)
            self.enabled = False
            return
        self._queue = collections.deque(maxlen=MAX_STEPS_PER_REPORT)
        self._thread = threading.Thread(target=self._run, name="gpumux-reporter", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    # ---- the training thread's side: no network, no locks, no waiting

    @property
    def batch_size(self):
        """The batch size the job should use (its own until the coordinator says otherwise)."""
        return self._target

    @property
    def running_batch(self):
        """The batch size steps are recorded at (set by step(b), set_running_batch, adopt)."""
        return self._running_batch

    @property
    def registered(self):
        return self._registered

    def step(self, batch_size=None):
        """Context manager timing one training step (time.perf_counter) at batch_size, or at
        the running batch size when None. A step that raises is not recorded."""
        if batch_size is not None:
            self._running_batch = int(batch_size)
        return _Step(self)

    def data(self):
        """Context manager marking host-side data work (loading, copying to the device); its
        time is summed into the next step's last_data_s, whether it runs inside the step or
        just before it. Not reported to the coordinator."""
        return _Data(self)

    def adopt(self):
        """Makes the coordinator's batch size the running one and returns it."""
        self._running_batch = self._target
        return self._running_batch

    def set_running_batch(self, batch_size):
        """Tells the SDK the batch size the job runs from now on."""
        self._running_batch = int(batch_size)

    def record(self, seconds, batch_size=None):
        """Records one step the job timed itself (instead of `with step():`)."""
        self.last_step_s = seconds
        self.steps += 1
        if self._queue is not None:
            b = self._running_batch if batch_size is None else int(batch_size)
            self._queue.append((b, float(seconds)))

    # ---- the background thread's side

    def _run(self):
        wait = 0.0  # register at once
        while not self._stop.wait(wait):
            wait = self._cycle()
        self._finish()

    def _cycle(self):
        """One exchange; returns the seconds until the next one."""
        try:
            if not self._registered:
                self._register()
            else:
                self._report()
        except (OSError, http.client.HTTPException) as e:
            return self._failed(e)
        except Exception as e:  # never let the reporter die: the job keeps its batch size
            self._complain("internal", "gpumux: reporter error %r; retrying" % (e,))
            return self._failed(e)
        if self._down:
            self._down = False
            _log.info("gpumux: coordinator at %s reachable again", self._endpoint.describe())
        if self._registered:
            self._retry_s = 0.0
            return self.report_every_s
        # Not registered after an answer: told to register again (404 to a report: at once),
        # or the registration was refused (backing off like an outage).
        return 0.0 if self.last_error is None else self._backoff()

    def _backoff(self):
        self._retry_s = min(self._retry_max_s, max(self._retry_first_s, self._retry_s * 2))
        return self._retry_s

    def _failed(self, e):
        self.last_error = "%s: %s" % (type(e).__name__, e)
        if not self._down:
            self._down = True
            _log.warning("gpumux: no coordinator at %s (%s); training goes on at batch size %d, "
                         "retrying in the background", self._endpoint.describe(),
                         self.last_error, self._running_batch)
        return self._backoff()

    def _complain(self, kind, message):
        if kind not in self._complained:
            self._complained.add(kind)
            _log.warning(message)

    def _take_steps(self):
        q, steps = self._queue, []
        for _ in range(len(q)):
            try:
                steps.append(q.popleft())
            except IndexError:
                break
        return steps

    def _give_back(self, steps):
        room = MAX_STEPS_PER_REPORT - len(self._queue)
        if room > 0:
            self._queue.extendleft(reversed(steps[-room:]))

    def _adopt_reply(self, reply):
        if reply is None:
            return
        b = reply.get("batch_size")
        if _positive_int(b):
            if self.min_batch and b < self.min_batch:
                b = self.min_batch
            if self.max_batch and b > self.max_batch:
                b = self.max_batch
            self._target = b
        elif b is not None:
            self._complain("batch", "gpumux: the coordinator sent batch_size %r; ignored" % (b,))
        state = reply.get("state")
        if isinstance(state, str):
            self.state = state
        every = reply.get("report_every_s")
        if isinstance(every, (int, float)) and not isinstance(every, bool) and 0.01 <= every <= 3600:
            self.report_every_s = float(every)

    def _check_reply(self, path, status, reply):
        """Logs (once per kind) a refusal or a malformed reply; returns the reply usable or None."""
        if reply is None:
            self._complain("malformed", "gpumux: malformed reply to %s (HTTP %d, not a JSON "
                           "object); ignored" % (path, status))
            return None
        if status != 200:
            error = reply.get("error", "")
            self.last_error = "HTTP %d: %s" % (status, error)
            self._complain("refused%s%d" % (path, status), "gpumux: the coordinator refused %s: "
                           "HTTP %d %s" % (path, status, error))
            return None
        return reply

    def _register(self):
        body = {"job": self.job_id, "class": self.job_class, "batch_size": self._running_batch,
                "gpus": self.gpus, "pid": os.getpid()}
        if self.min_batch:
            body["min_batch"] = self.min_batch
        if self.max_batch:
            body["max_batch"] = self.max_batch
        if self.memory_mib > 0:
            body["memory_mib"] = self.memory_mib
        if self.noise_scale:
            body["noise_scale"] = self.noise_scale
        status, reply = self._endpoint.post("/v1/register", body)
        if status != 200:
            self._check_reply("/v1/register", status, reply)
            if self.last_error is None:
                self.last_error = "HTTP %d" % status
            return
        self._registered = True
        self.last_error = None
        self._adopt_reply(self._check_reply("/v1/register", status, reply))
        _log.info("gpumux: registered %s (%s, batch %d) with %s: batch %d, %s", self.job_id,
                      self.job_class, self._running_batch, self._endpoint.describe(),
                      self._target, self.state)

    def _report(self):
        steps = self._take_steps()
        body = {"job": self.job_id, "steps": steps}
        if self.noise_scale:
            body["noise_scale"] = self.noise_scale
        try:
            status, reply = self._endpoint.post("/v1/report", body)
        except BaseException:
            self._give_back(steps)
            raise
        if status == 404:  # the coordinator lost us (it restarted): register, then resend
            self._registered = False
            self.last_error = None
            self._give_back(steps)
            return
        if status == 200:
            self.last_error = None
        self._adopt_reply(self._check_reply("/v1/report", status, reply))

    def _finish(self):
        """On close: the last steps and a leave, when registered (or never tried yet)."""
        try:
            if not self._registered and self.last_error is None and self._queue:
                self._register()
            if self._registered:
                self._report()
                if self._registered:
                    self._endpoint.post("/v1/leave", {"job": self.job_id})
        except Exception as e:  # leaving is best effort: the coordinator times the job out
            self.last_error = "%s: %s" % (type(e).__name__, e)

    # ---- closing

    def close(self):
        """Sends the last steps and leaves (at most about 2 x timeout_s when the coordinator
        hangs; at once when none is reachable). Safe to call twice; atexit calls it."""
        if self._closed:
            return
        self._closed = True
        if self._thread is None:
            return
        atexit.unregister(self.close)
        if os.getpid() != self._pid:  # a forked child: the reporter belongs to the parent
            return
        self._stop.set()
        self._thread.join(timeout=2 * self._endpoint.timeout_s + 1.0)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False

    def __repr__(self):
        return ("gpumux.Session(job=%r, class=%r, batch_size=%d, running=%d, state=%r)"
                % (self.job_id, self.job_class, self._target, self._running_batch, self.state))
