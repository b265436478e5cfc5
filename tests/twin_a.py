"""One package's AdamW8bit, for the two-specs-one-case-id test: plain SGD at its lr."""

from planted import PlainSGD


class AdamW8bit(PlainSGD):
    pass
