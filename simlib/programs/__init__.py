"""Simulated programs and how they are run: the harness, the MoE scenario, the incident gallery.

``spec`` describes the MoE scenario once, for the simulator and the GPU;
``harness`` warms a program up, captures it, replays it with fresh inputs and
compares each replay with an eager run; ``scenarios`` is the dual-stream MoE
decode step as a program of that harness, and ``gallery`` the incident family.
``verdict``, ``latency`` and ``eager_program`` run them and read their traces.
"""
