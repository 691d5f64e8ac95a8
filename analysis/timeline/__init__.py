"""The step as a timeline model: each loop range's steps built into a dependency graph from
the edges the export holds (launch correlation, stream order, synchronization records,
waits between threads), replayed, and read back along their critical path.

    loops.py   which steps are modeled; each loop's critical path and replayed wall time
    graph.py   one step's nodes and edges
    replay.py  the replay and the critical path walk

It reads the attributed trace (analysis/model.py) and the step windows' rows
(load/nsys_steps.py); systems.py and the rules read it; nothing below it imports it.
"""
