"""Build step of the Python package (metadata: pyproject.toml).

Before the package is built, the vitc CLI and the runtime shared library are
copied from the CMake build directory ($VITC_BUILD_DIR, relative to this
directory like setup.sh's, or build/) into python/vitc/_bin and
python/vitc/_lib, whence the wheel takes them.  Nothing is compiled here:
run ./setup.sh (or cmake) first.
"""
import os
import re
import shutil
import stat

from setuptools import setup
from setuptools.command.build_py import build_py

try:  # setuptools >= 70.1 has its own; before, the wheel package's
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    try:
        from wheel.bdist_wheel import bdist_wheel
    except ImportError:  # no wheel to build (pip then asks for the wheel package itself)
        bdist_wheel = None

ROOT = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(ROOT, "python", "vitc")


def cmake_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(\s*vitc\s+VERSION\s+([0-9][0-9.]*)", f.read())
    if not m:
        raise SystemExit("setup.py: no 'project(vitc VERSION ...)' in CMakeLists.txt")
    return m.group(1)


def cmake_build_dir():
    d = os.environ.get("VITC_BUILD_DIR") or "build"
    return d if os.path.isabs(d) else os.path.join(ROOT, d)


def sanitized(build):
    """True when the CMake cache says the build has ASan/UBSan (VITC_SANITIZE or VITC_FUZZ)."""
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            cache = f.read()
    except OSError:
        return False
    return re.search(r"^VITC_(SANITIZE|FUZZ):BOOL=(ON|1|TRUE|YES)\s*$", cache, re.M | re.I) is not None


class copy_binaries_build_py(build_py):
    """build_py that first copies the CLI and the runtime from the CMake build."""

    def run(self):
        build = cmake_build_dir()
        cli = os.path.join(build, "vitc")
        lib = os.path.join(build, "libvitc_runtime.so.0")
        missing = [p for p in (cli, lib) if not os.path.isfile(p)]
        if missing:
            raise SystemExit(
                "vitc: the package ships the vitc CLI and the runtime library from the CMake build, and "
                + " and ".join(missing) + (" is" if len(missing) == 1 else " are") + " missing.\n"
                "Run ./setup.sh first (it builds build/vitc and build/libvitc_runtime.so.0), or set "
                "VITC_BUILD_DIR to the build directory that holds them.")
        if sanitized(build):
            raise SystemExit(
                f"vitc: {build} is a sanitizer build (VITC_SANITIZE/VITC_FUZZ): its runtime cannot be loaded "
                "into a Python built without ASan. Build without it (./setup.sh) and point VITC_BUILD_DIR there.")
        # copyfile, not copy2: a fresh mtime, so build_py never keeps an older copy in build/lib
        for src, dst in ((cli, os.path.join(PKG, "_bin", "vitc")),
                         (lib, os.path.join(PKG, "_lib", "libvitc_runtime.so.0"))):
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            if os.path.exists(dst):
                os.remove(dst)
            shutil.copyfile(os.path.realpath(src), dst)
            os.chmod(dst, os.stat(dst).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            print(f"vitc: {src} -> {os.path.relpath(dst, ROOT)}")
        super().run()


cmdclass = {"build_py": copy_binaries_build_py}
if bdist_wheel is not None:
    class platform_wheel(bdist_wheel):
        """The wheel carries ELF binaries but no Python extension: py3-none-<platform>."""

        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):
            return ("py3", "none", super().get_tag()[2])

    cmdclass["bdist_wheel"] = platform_wheel


setup(
    version=cmake_version(),
    cmdclass=cmdclass,
    # setuptools' own build tree stays out of CMake's build/
    options={"build": {"build_base": os.path.join("python", "build")}},
)
