"""The search: trials allocated per task (allocation), the budget that bounds them (budget),
MetaSchedule's strategy behind it (strategy), every trial recorded (recording), the driver that
runs the passes (driver), and around it the space checks, cost model, task scheduler, candidate
builder and the confirmation of the fastest kernels."""
