"""Where a result came from: ``gpu_demo.protocol.provenance`` (on the lowest floor, so that the
corpus and zoo runners can write it too), named here for the measurements."""

from gpu_demo.protocol.provenance import RESULTS_DIR, provenance

__all__ = ["RESULTS_DIR", "provenance"]
