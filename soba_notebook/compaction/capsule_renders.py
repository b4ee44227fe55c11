"""The capsules a compaction engine rendered lately, so that one compaction renders each once.

A compaction measures the same capsule up to five times on its way to the transcript (fitted to
its reserve, priced by the soft gate, fitted again as the summary's answer, measured as the
continuation, counted as it is written); near its caps a capsule is hundreds of items, and in a
replay of a long session those renders grew faster than the session (docs/BENCHMARKS.md). A
capsule is a frozen value and the kernel-state field is replaced, never changed, per compaction:
the same objects render the same text, so identity is the key (no walk of a large capsule to
compare or hash it).
"""

from __future__ import annotations

from typing import Any

from ..session.capsule_schema import Capsule
from ..session.payloads import KernelStateData
from ..tokens import TokenCounter
from .capsule import render
from .kernel_section import with_kernel_state

__all__ = ["RENDERS_KEPT", "CapsuleRender", "CapsuleRenders"]

#: renders kept: one compaction measures at most four distinct capsules (its local capsule, the
#: prediction's baseline, the model's answer and that answer fitted)
RENDERS_KEPT = 4


class CapsuleRender:
    """A capsule's text as model input and, once counted, its raw count."""

    __slots__ = ("capsule", "checkpoint_id", "form", "kernel", "quality", "raw", "text")

    def __init__(self, capsule: Capsule, quality: str, checkpoint_id: str, kernel: KernelStateData,
                 text: str) -> None:
        self.capsule, self.quality, self.checkpoint_id, self.kernel = capsule, quality, checkpoint_id, kernel
        self.text = text
        #: the counter's raw count of ``text`` in the message form it was counted with (``form``)
        self.raw: int | None = None
        self.form: tuple[Any, ...] = ()

    def of(self, capsule: Capsule, quality: str, checkpoint_id: str, kernel: KernelStateData) -> bool:
        return (capsule is self.capsule and kernel is self.kernel and quality == self.quality
                and checkpoint_id == self.checkpoint_id)


class CapsuleRenders:
    """The latest :data:`RENDERS_KEPT` renders, newest first."""

    __slots__ = ("_renders",)

    def __init__(self) -> None:
        self._renders: list[CapsuleRender] = []

    def render(self, capsule: Capsule, quality: str, checkpoint_id: str, kernel: KernelStateData) -> CapsuleRender:
        """``capsule`` as the first message of model input with ``kernel`` state: rendered once."""
        for done in self._renders:
            if done.of(capsule, quality, checkpoint_id, kernel):
                return done
        text = with_kernel_state(render(capsule, checkpoint_id=checkpoint_id, quality=quality), kernel)
        done = CapsuleRender(capsule, quality, checkpoint_id, kernel, text)
        self._renders = [done, *self._renders[:RENDERS_KEPT - 1]]
        return done

    @staticmethod
    def raw_count(done: CapsuleRender, counter: TokenCounter) -> int:
        """``counter``'s raw count of the render as a user message, counted once per message form."""
        form = (counter.message_form, counter.tool_results_rendered, counter.quote_tokens)
        if done.raw is None or done.form != form:
            done.raw, done.form = counter.count_message({"role": "user", "content": done.text}), form
        return done.raw
