"""py_test that runs its module under pytest, as `make test` does.

Bazel 4's native py_test runs its `main` as a script, which must be among
its srcs: here //tff_ddp_tests:pytest_main.py, given the module's runfiles
path, with pytest.ini beside it (scripts/build_files.py makes the suite's
conftest.py a dep of every py_test: pytest imports it for every module).
"""

_MAIN = "//tff_ddp_tests:pytest_main.py"

def py_test(name, srcs, data = [], **kwargs):
    native.py_test(
        name = name,
        srcs = srcs + [_MAIN],
        main = _MAIN,
        args = ["$(rootpath :%s)" % srcs[0]],
        data = data + ["//:pytest.ini"],
        **kwargs
    )
