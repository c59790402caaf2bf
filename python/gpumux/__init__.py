"""gpumux task SDK: a training loop reports its step times to the node coordinator and learns
the batch size it should use (docs/COORDINATOR.md, python/README.md).

    import gpumux
    session = gpumux.Session(job_class="resnet", batch_size=64, min_batch=16, max_batch=256)
    batch = session.batch_size
    while training:
        if session.batch_size != batch:      # adopt at a boundary of the job's choosing
            batch = session.batch_size
            loader = make_loader(batch)
        with session.step(batch):
            with session.data():
                x, y = next(loader)
            train_one_minibatch(x, y)
    session.close()                          # also at exit, or `with gpumux.Session(...)`

The training thread never waits on the network: a step appends (batch size, seconds) to a
bounded deque; a daemon thread registers, sends the steps every `report_every_s` and reads the
batch size the coordinator wants. Without a reachable coordinator every call is a cheap no-op
and `batch_size` stays what the job set. Only Python's standard library is used.

Environment:
  GPUMUX_COORDINATOR   unix:///run/gpumux/coordinator.sock or http://127.0.0.1:9403
                       (default: that socket when it exists, else that address)
  GPUMUX_DISABLE=1     do nothing at all
  GPUMUX_POD, GPUMUX_CONTAINER   the job's id "namespace/pod/container" (set by the device
                       plugin); without them "host/<hostname>/<pid>"
  GPUMUX_GPU_UUIDS     the GPUs the job runs on (set by the device plugin and the runtime hook);
                       else NVIDIA_VISIBLE_DEVICES when it lists UUIDs
  GPUMUX_GPU_MEM_MIB   the job's GPU memory grant, which bounds the batch sizes it is offered
"""
__version__ = "0.1.0"  # gpumux's version (CMakeLists.txt project()); ctest python.PipInstall

from .session import Session, default_gpus, default_job_id, MAX_STEPS_PER_REPORT
from .transport import DEFAULT_ADDRESS, DEFAULT_SOCKET

__all__ = ["__version__", "Session", "DEFAULT_SOCKET", "DEFAULT_ADDRESS", "MAX_STEPS_PER_REPORT",
           "default_gpus", "default_job_id"]
