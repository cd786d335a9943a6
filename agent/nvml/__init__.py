"""NVML access for the agent.

- `backend.NvmlBackend`: the interface the rest of the agent uses.
- `pynvml_backend.PynvmlBackend`: its implementation over pynvml (the only `import pynvml`);
  `open_backend(fixture, host_root)` gives the real one or, with a fixture, one over the fake;
  `fake_backend(fixture, clock=, sleep=)` also returns the `FakePynvml` for tests to drive.
- `fake_pynvml.FakePynvml`: a stand-in for the pynvml module answering from a fixture.
- `fixture`: load, validate and dump fixtures (`load_fixture`, `dump`, `builtin_names`).
"""
