"""CUDA MPS for shared GPUs (DESIGN §12): what `gputopo-agent mps` runs, in its own DaemonSet.

- `layout`: where each Linux user's daemon keeps its pipe and log directories under the MPS root,
  the shared `/dev/shm` directory, and the status file; the users served.
- `daemon`: one `nvidia-cuda-mps-control -f` child per user, started as that user; `quit` on exit.
- `computemode`: the shared GPUs' compute mode, set on start and restored on exit.
- `supervisor`: keeps every daemon running (restart with backoff) and writes the status file.
- `status`: the status file's codec, and the reader the device plugin uses to mark the MPS
  resource Unhealthy while a daemon is down.
- `metrics`: daemon up, restarts, clients per GPU.
"""
