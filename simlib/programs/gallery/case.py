"""One gallery case: a public incident, the PyTorch it models, and its simulated hazard and fix.

A case's programs are ``simlib.programs.harness`` builds; its script drives a
``Session`` the way the incident's runner did (warm up, capture, replay; for
several graphs, in an order). ``Case.run`` gives the outcome, what each
replay computed, and the checker's findings on the same trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from ...checker import Finding
from ...engine.runtime import Runtime
from ...engine.tensor import TensorHandle
from ...glossary import CORRECT
from ..harness import Build, ProgramResult, Replayed, Session

Script = Callable[[Session, str, bool], None]      # (session, order, fixed) -> drive it
ONE_ORDER = "warm up, capture, replay 3 times"


def one_graph(session: Session, order: str, fixed: bool) -> None:
    """The single-graph runner: two warm-up calls, a capture, three replays with fresh inputs."""
    session.warm_up(calls=2)
    session.capture()
    for _ in range(3):
        session.replay()


@dataclass(frozen=True)
class CaseRun:
    """One run of a case's hazardous or fixed program, in one order."""

    name: str
    order: str
    result: ProgramResult
    findings: list[Finding]
    shows: str | None = None                 # the graph (program name) its pictures draw

    @property
    def outcome(self) -> str:
        return self.result.outcome

    @property
    def rules(self) -> list[str]:
        """The checker's rule codes, in report order (empty: clean)."""
        return [f.code for f in self.findings]

    @property
    def replays(self) -> list[Replayed]:
        return self.result.replays

    def computed(self) -> list[str]:
        """What each replay computed against eager: ``bs1 replay for call 4: f(x4) != eager ...``."""
        return [str(r) for r in self.replays]


@dataclass(frozen=True)
class Case:
    """An incident pattern: ``name`` is the hazardous program, ``fix`` the fixed one (the
    names of their PyTorch twins in ``gpu_demo.corpus``, where they have one)."""

    name: str
    fix: str
    threads: tuple[str, ...]
    story: str
    pytorch: str                            # the few lines of PyTorch the hazard models
    pytorch_fix: str
    build: Callable[[bool], Build]          # build(fixed) -> the harness build
    expected: Mapping[str, str]             # order -> the hazard's outcome (simlib.glossary)
    rules: tuple[str, ...]                  # what the checker reports on the hazard (where it goes wrong)
    script: Script = one_graph
    fixed_expected: str = CORRECT
    notes: Mapping[str, str] = field(default_factory=dict)   # order -> what happens, in a sentence
    shows: str | None = None                # the graph its pictures draw (default: the first captured)
    @property
    def orders(self) -> tuple[str, ...]:
        return tuple(self.expected)

    def outcomes(self, run: CaseRun) -> frozenset[str]:
        """Every outcome the simulator predicts for ``run`` of this case: the simulated one, and the
        one where the allocator hands no freed block out again. A hazard that is a freed block goes
        wrong only once something else takes the block; on a GPU the next request may take another
        (another size class, another stream's list), and the replays stay right for now: the rule
        fires either way, and ``correct`` is then luck, not safety (``simlib.engine.allocator``)."""
        kept = self.run(run.name == self.fix, run.order, reuse_default=False)
        return frozenset({run.outcome, kept.outcome})

    def run(self, fixed: bool = False, order: str | None = None, *, reuse_default: bool = True) -> CaseRun:
        """Simulate the hazard (or its fix) in ``order`` (the first of ``orders`` by default);
        ``reuse_default=False``: with an allocator that hands no freed block out again."""
        order = self.orders[0] if order is None else order
        if order not in self.expected:
            raise ValueError(f"{self.name}: no order {order!r}; the orders are {list(self.orders)}")
        session = Session(self.build(fixed), runtime=Runtime(reuse_default=reuse_default))
        self.script(session, order, fixed)
        result = session.result()
        return CaseRun(self.fix if fixed else self.name, order, result, result.findings(), self.shows)


def refreshed(rt: Runtime, t: TensorHandle, name: str, k: int) -> None:
    """``t.copy_(fresh)``: call ``k``'s fresh value ``{name}{k}`` into the static buffer ``t``."""
    upload = rt.from_host(t.shape, f"{name}{k}", value=f"{name}{k}")
    t.copy_(upload)
    rt.release(upload)
