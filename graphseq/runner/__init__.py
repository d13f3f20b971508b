"""The runner: a pipeline's configuration (:mod:`.config`), its run folder
(:mod:`.run_folder`), the run itself, planned then executed (:mod:`.run`),
and the launcher of several processes (:mod:`.launch`)."""
from .run import Plan, execute, plan, run

__all__ = ["Plan", "execute", "plan", "run"]
