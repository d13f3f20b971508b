"""The reusable pipeline stages. Each module holds one kind of work (loading
data, building a model, training, evaluating, reporting); importing this
package imports every module in it, and so registers every stage: a new
stage is a function in a module here, decorated with :func:`stage`.
"""
import importlib
import pkgutil

from .context import PRODUCTS, Context
from .registry import SPECS, STAGES, Precheck, StageSpec, check_order, get_stage, stage, stage_params, stage_spec

__all__ = ["Context", "PRODUCTS", "Precheck", "SPECS", "STAGES", "StageSpec", "check_order", "get_stage", "stage",
           "stage_params", "stage_spec"]

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
