"""The reproduction harness behind ``benchmarks/faithfulness/reproduce.py`` (rows, runs, cache, table, figure);
``benchmarks/faithfulness/dpdc_tables.py`` shares its condense-or-resume and cache code."""
