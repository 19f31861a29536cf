"""HTTP routes and their dependencies."""
