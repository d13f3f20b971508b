"""The reusable pipeline stages. Importing this package registers every stage;
each module holds one kind of work (loading data, building a model, training,
evaluating, reporting).
"""
from .registry import (SPECS, STAGES, Precheck, StageSpec, check_order, get_stage, stage,  # noqa: F401
                       stage_params, stage_spec)

# Stage modules register themselves on import.
from . import planetoid, models, node_training  # noqa: F401,E402
from . import active  # noqa: F401,E402
from . import charlm, polarity  # noqa: F401,E402
from . import attention_comparison  # noqa: F401,E402
from . import graph_training  # noqa: F401,E402
from . import captioning  # noqa: F401,E402
from . import fewshot  # noqa: F401,E402
from . import bert  # noqa: F401,E402
from . import paragraph_vectors  # noqa: F401,E402
