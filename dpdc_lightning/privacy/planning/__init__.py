"""The run's privacy plan, fixed before any data is read and never changed afterwards.

- :mod:`.plan` ``StepSchedule`` (what a method asks of the plan) and ``PrivacyPlan`` (plan.json);
- :mod:`.planner` ``make_plan``: sample rates, δ < 1/N, the noise multiplier or the step count;
- :mod:`.vacuous` settings whose honest (ε, δ) promises nothing, and the warnings about them.
"""
