"""The engine: the simulated host thread, CUDA runtime and device.

``runtime`` holds ``Runtime``, the API a simulated program calls; the other
modules are one concept each (streams and events, tensor handles, the
allocator, captured graphs, the device, time, symbolic values, errors, the
H200 timing profile, races run as schedules). The engine writes the trace
(``simlib.trace``) and imports nothing from the programs, the checker or the
tutorial.
"""
