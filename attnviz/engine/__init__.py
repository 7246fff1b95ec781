"""The engine: the textbook attention core, blocked attention of any length, the results every source makes.

Nothing here reads a file, draws or parses a command line: arrays and requests in, arrays and results out.
"""
