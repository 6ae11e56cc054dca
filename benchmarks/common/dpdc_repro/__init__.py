"""The reproduction harness behind ``benchmarks/reproduce.py`` (rows, runs, cache, table, figure);
``benchmarks/dpdc_tables.py`` shares its condense-or-resume and cache code."""
