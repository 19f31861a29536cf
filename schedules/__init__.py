"""Schedule spaces and rules convtune searches (MetaSchedule space generators, our own rules)."""
