"""The process group's argument checks: a bad argument raises before anything is sent."""

import torch


class _Checks:
    """Checks of one call's arguments against the group (its `rank()`, `size()`, `_name`)."""

    def _reject(self, op: str, text: str):
        raise ValueError(f"jitccl backend: {op} on rank {self.rank()} of group {self._name!r}: {text}")

    def _root(self, op: str, root: int) -> None:
        if not 0 <= root < self.size():
            self._reject(op, f"root {root} is not a rank of this group of {self.size()}")

    def _peer(self, op: str, peer: int) -> None:
        if not 0 <= peer < self.size() or peer == self.rank():
            self._reject(op, f"peer {peer} is not another rank of this group of {self.size()}")

    def _blocks(self, op: str, what: str, n: int) -> None:
        if n != self.size():
            self._reject(op, f"the {what} has {n} tensors, the group {self.size()} ranks")

    def _sized(self, op: str, what: str, got: int, want: int) -> None:
        if got != want:
            self._reject(op, f"the {what} has {got} elements, {want} are needed")

    def _root_blocks(self, op: str, root: int, lists: list, what: str, numel: int) -> list:
        """The root's list of one block per rank (`what`: "output" or "input"), each of
        `numel` elements; other ranks must pass none. Empty off the root."""
        self._root(op, root)
        if self.rank() != root:
            if any(len(t) for t in lists):
                self._reject(op, f"only the root ({root}) has {what}s")
            return []
        blocks = self._one(lists, op)
        self._blocks(op, f"{what} list", len(blocks))
        for b in blocks:
            self._sized(op, what, b.numel(), numel)
        return blocks

    def _splits(self, op: str, what: str, t: torch.Tensor, splits: list) -> list:
        """The element counts of `t`'s blocks by rank: `splits` rows each, or equal blocks."""
        n = self.size()
        if not splits:
            if t.numel() % n:
                self._reject(op, f"the {what}'s {t.numel()} elements are not {n} equal blocks")
            return [t.numel() // n] * n
        if len(splits) != n or any(s < 0 for s in splits):
            self._reject(op, f"{what} split sizes {splits}: need {n} counts, none negative")
        if t.dim() == 0 or sum(splits) != t.shape[0]:
            self._reject(op, f"{what} split sizes {splits} do not add up to its first dimension "
                             f"({tuple(t.shape)})")
        row = t.numel() // t.shape[0] if t.shape[0] else 0
        return [s * row for s in splits]
