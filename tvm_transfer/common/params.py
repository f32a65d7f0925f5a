"""Hyper-parameters read from the constructor's signature (scikit-learn convention), for every estimator.

A class that mixes in :class:`HyperParameters` names its hyper-parameters once, as keyword arguments of
``__init__`` kept as attributes of the same name: :meth:`~HyperParameters.get_params` reads them (and a
saved model stores them), :meth:`~HyperParameters.set_params` changes them. The constructor and
``set_params`` check them by the same rules (:meth:`~HyperParameters._check_params`).
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar, Self


class HyperParameters:
    """Mixin: the constructor arguments are the hyper-parameters.

    A subclass may restrict some to a fixed set of values (:attr:`choices`) and forbid changing others
    once fitted (:attr:`fixed_once_fitted`, which needs :meth:`_is_fitted`).
    """

    #: Hyper-parameters that take one of a fixed set of values: name -> the allowed values.
    choices: ClassVar[dict[str, tuple]] = {}
    #: Hyper-parameters a fitted model cannot change (its fitted state was shaped by them).
    fixed_once_fitted: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def hyper_parameter_names(cls) -> tuple[str, ...]:
        """Names of the constructor arguments, the hyper-parameters: those of the nearest ``__init__`` in
        the class hierarchy that names all its arguments (a subclass may pass ``**kwargs`` through)."""
        for klass in cls.__mro__:
            init = klass.__dict__.get("__init__")
            if init is None:
                continue
            parameters = list(inspect.signature(init).parameters.values())[1:]
            if all(p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
                return tuple(p.name for p in parameters)
        return ()

    def get_params(self) -> dict[str, Any]:
        """Constructor arguments (scikit-learn convention)."""
        return {name: getattr(self, name) for name in self.hyper_parameter_names()}

    def set_params(self, **params: Any) -> Self:
        """Change hyper-parameters (scikit-learn convention); those of :attr:`fixed_once_fitted` only while
        the model is not fitted."""
        known = self.hyper_parameter_names()
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise ValueError(
                f"unknown {type(self).__name__} hyper-parameter(s) {unknown}; known: {list(known)}"
            )
        changed = sorted(
            name for name in self.fixed_once_fitted if name in params and params[name] != getattr(self, name)
        )
        if changed and self._is_fitted():
            raise ValueError(f"cannot change {changed} of a fitted model (its weights were fitted with them)")
        self._check_params({**self.get_params(), **params})
        for name, value in params.items():
            setattr(self, name, value)
        return self

    def _is_fitted(self) -> bool:
        """Whether the model holds a fitted state; a class with :attr:`fixed_once_fitted` supplies it."""
        raise NotImplementedError

    def _keep_hyper_parameters(self, arguments: dict[str, Any]) -> None:
        """Check the constructor's ``arguments`` (its ``locals()``) with :meth:`_check_params` and keep its
        hyper-parameters as attributes, so that long signatures need not list each one again."""
        names = self.hyper_parameter_names()
        missing = [name for name in names if name not in arguments]
        if missing:
            raise TypeError(f"{type(self).__name__}: the constructor's arguments lack {missing}")
        params = {name: arguments[name] for name in names}
        self._check_params(params)
        for name, value in params.items():
            setattr(self, name, value)

    def _check_params(self, params: dict[str, Any]) -> None:
        """Raise ``ValueError`` for hyper-parameters that cannot work, alone or together; ``params`` holds
        all of them, as the constructor got them or as ``set_params`` would leave them, and nothing is
        kept before they pass. This checks :attr:`choices`; a subclass with more rules extends it."""
        self._check_choices(params)

    def _check_choices(self, params: dict[str, Any]) -> None:
        """Raise ``ValueError`` naming the first of ``params`` outside its :attr:`choices`."""
        for name, allowed in self.choices.items():
            if name in params and params[name] not in allowed:
                raise ValueError(f"unknown {name} {params[name]!r}; choose one of {', '.join(allowed)}")
