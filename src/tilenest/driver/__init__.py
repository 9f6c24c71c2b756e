"""The compile driver: binding, specialization, the stage pipeline and the compiled kernel.

capture -> verify (tilenest.driver.front) -> the target's own stages (plan -> lower ->
codegen -> load; tilenest.backends.registry) -> launch (the prepared Executable's run).
`CompileOptions` (tilenest.driver.options) is every option of one compile, read once.
"""
