from .optim import SignSGD

__all__ = ["SignSGD"]
