"""costctl: stop wasting money on rented GPUs.

Runs beside a training job, samples GPU utilization, parses training progress, accrues spend
into a ledger and lets a policy engine act (autostop, budget caps, plateau and divergence
advice). See README.md.
"""

__version__ = "0.1.0"
