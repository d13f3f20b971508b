"""Packaging hook: the wheel carries the named pipelines inside the package
(``graphseq/pipelines/*.toml``), copied at build time from the top-level
``pipelines/`` folder, which stays the one place they are written. All other
metadata lives in pyproject.toml."""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithPipelines(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "graphseq" / "pipelines"
        self.mkpath(str(target))
        for pipeline in sorted(Path(__file__).resolve().parent.glob("pipelines/*.toml")):
            self.copy_file(str(pipeline), str(target / pipeline.name))


setup(cmdclass={"build_py": BuildWithPipelines})
