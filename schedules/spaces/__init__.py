"""The schedule spaces: the ``ScheduleSpace`` ABC, the registry, one module per space named
after it. A space imports ``ops`` and ``lowering``, never another space."""
