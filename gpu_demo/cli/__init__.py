"""``python -m gpu_demo COMMAND``: ``main`` (run, bench, decode, record, fidelity),
``check`` (check, corpus, recorder-overhead), ``common`` (what they share)."""
