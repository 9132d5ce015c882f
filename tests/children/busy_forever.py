"""Prints a loss line every 0.1 s forever (used to be killed)."""
import time

i = 0
while True:
    print(f"loss: {1.0 / (i + 1):.5f}")
    i += 1
    time.sleep(0.1)
