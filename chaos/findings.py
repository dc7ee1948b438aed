"""What the checker found in a seed: duplicates and losses counted, and every finding's line."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Findings:
    """What the checker found in one seed."""

    duplicates: int = 0
    losses: int = 0
    violations: list[str] = field(default_factory=list)

    def duplicate(self, text: str, count: int = 1) -> None:
        self.duplicates += count
        self.violations.append(f"DUPLICATE x{count}: {text}")

    def lost(self, text: str, count: int = 1) -> None:
        self.losses += count
        self.violations.append(f"LOSS x{count}: {text}")

    def violation(self, text: str) -> None:
        self.violations.append(text)
