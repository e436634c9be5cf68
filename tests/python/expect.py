"""The one check the Python test programs share: a call that must raise."""


def raises(exc, fn, words):
    """Calls fn, which must raise exc (a type or a tuple of types) with words
    in its message; prints the message and returns the exception. Anything
    else is an AssertionError."""
    try:
        fn()
    except exc as e:
        assert words in str(e), f"'{words}' not in '{e}'"
        print(f"raised {type(e).__name__}: {e}")
        return e
    name = exc.__name__ if isinstance(exc, type) else "/".join(x.__name__ for x in exc)
    raise AssertionError(f"no {name} raised (expected '{words}')")
