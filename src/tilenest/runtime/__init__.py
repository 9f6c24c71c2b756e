"""Runtime services shared by backends: argument binding, specialization keys, caches."""
