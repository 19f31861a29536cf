"""What a precision rewrite of convs did (int8 in ``quantized.py``, bf16 in ``bf16.py``): how
many convs it changed and why it left the others in fp32, said in one line of the job's notes."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class ConvRewrites:
    converted: int = 0
    #: Reason → convs left in fp32 for it.
    kept: Counter[str] = field(default_factory=Counter)

    def line(self, prefix: str, what: str) -> str:
        """``"{prefix}: N of M {what}, the others in fp32 (reasons)"``."""
        total = self.converted + sum(self.kept.values())
        line = f"{prefix}: {self.converted} of {total} {what}"
        if self.kept:
            why = "; ".join(f"{n}× {reason}" for reason, n in self.kept.most_common())
            line += f", the others in fp32 ({why})"
        return line
