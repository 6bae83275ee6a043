"""The recorder: what a real PyTorch program froze, as a ``simlib.trace.Trace``.

``recorder.CaptureRecorder`` is a dispatch mode (its per-op path in ``ops``,
Triton kernels called directly in ``raw_launches``) that writes every op down as
the host issued it, into one ``journal``, with its bookkeeping in parts: ``handles``
(tensor objects and their names), ``ledger`` (memory blocks and their pools),
``capture_book`` (graphs, pools, replays), ``stream_order`` (streams, events,
what a launch depends on), ``mutations`` (host-side changes, shape reads). Once a
program serves, or captures in a loop, it stands aside (``aside``): ``memory_watch`` records only the
calls that touch memory a rule follows, ``free_watch`` sees the frees of the
blocks graphs use through their storages, and ``report_gate`` switches torch's
GPU-trace reports off meanwhile.
``capture.record_capture`` runs warm-up, capture and replays under it
(``dry_run``: on CPU tensors, nothing captured). Its senses:
``hooks`` (torch's GPU-trace callbacks: events, allocations, syncs),
``patches`` (``torch.cuda.graph`` and direct Triton launches),
``host_reads`` (shape reads during capture), ``tensor_reads`` (its own), ``triton_access`` (what a Triton
kernel writes, from its source), ``op_plans`` (what an op reads and writes, from
its schema, the host numbers it froze, host-to-device copies), ``device`` (the
current stream), ``call_site`` (the user's line that issued a launch),
``naming`` (readable stream and tensor names), ``annotate`` (optional labels a
program may add), ``host_state`` (the host ints and flags a capture changed),
``rebinds`` (a module's tensor attribute made to name another tensor),
``generators`` (which generator a random op draws from, which a graph advances).
For any program: imports nothing from the MoE demo.
"""
