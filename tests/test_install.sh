#!/bin/sh
# test_install: `cmake --install` into a fresh prefix, then what a C user
# does with it: build examples/classify.c against the installed runtime with
# pkg-config and with find_package(vitc), compile the example model with the
# installed vitc, and classify an image with each build; both must print the
# same top classes as the build tree's vitc run on the same model.
# usage: test_install.sh BUILD_DIR SOURCE_DIR [sanitized|plain]   (exit 77: skipped, with why)
set -eu
build=$1
src=$2
if [ "${3:-plain}" = sanitized ]; then
  echo "skipped: a runtime built with ASan/UBSan cannot be loaded by a program built without them"
  exit 77
fi
if ! pkg-config --exists stb; then
  echo "skipped: examples/classify.c needs stb_image (Debian libstb-dev)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" > "$tmp/install.log"

# what an installed runtime is: a versioned SONAME and its header
soname=$(readelf -d "$prefix/lib/libvitc_runtime.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
echo "SONAME $soname"
[ "$soname" = "libvitc_runtime.so.$(sed -n 's/^project(vitc VERSION \([0-9]*\)\..*/\1/p' "$src/CMakeLists.txt")" ]
[ -f "$prefix/include/vitc/runtime.h" ]

# 1. pkg-config
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
echo "pkg-config --libs vitc-runtime: $(pkg-config --libs vitc-runtime)"
cc -std=c11 -O1 -o "$tmp/classify-pc" "$src/examples/classify.c" \
  $(pkg-config --cflags --libs vitc-runtime stb) -lm

# 2. find_package(vitc)
mkdir -p "$tmp/proj"
cat > "$tmp/proj/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(classify_user C)
find_package(vitc 0.1 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(STB REQUIRED IMPORTED_TARGET stb)
add_executable(classify $src/examples/classify.c)
target_link_libraries(classify PRIVATE vitc::runtime PkgConfig::STB m)
CMAKE
cmake -S "$tmp/proj" -B "$tmp/proj/build" -DCMAKE_PREFIX_PATH="$prefix" > "$tmp/proj.log"
cmake --build "$tmp/proj/build" > "$tmp/proj-build.log"

# the installed vitc compiles; both builds classify with the installed library
"$prefix/bin/vitc" "$src/examples/vit-tiny.onnx" -o "$tmp/vit-tiny.so" --quiet
image=$src/tests/data/runtime/pattern64.png
LD_LIBRARY_PATH="$prefix/lib" "$tmp/classify-pc" "$tmp/vit-tiny.so" "$image" --top 3 > "$tmp/pc.txt"
LD_LIBRARY_PATH="$prefix/lib" "$tmp/proj/build/classify" "$tmp/vit-tiny.so" "$image" --top 3 > "$tmp/cmake.txt"
cat "$tmp/pc.txt"
LD_LIBRARY_PATH="$prefix/lib" ldd "$tmp/classify-pc" | grep -q "$prefix/lib/libvitc_runtime.so.0"
LD_LIBRARY_PATH="$prefix/lib" ldd "$tmp/proj/build/classify" | grep -q "$prefix/lib/libvitc_runtime.so.0"
cmp "$tmp/pc.txt" "$tmp/cmake.txt"
# the same as the build tree's classify, when it was built
if [ -x "$build/examples/classify" ]; then
  "$build/examples/classify" "$tmp/vit-tiny.so" "$image" --top 3 > "$tmp/tree.txt"
  cmp "$tmp/pc.txt" "$tmp/tree.txt"
fi
grep -q "^ *[0-9]" "$tmp/pc.txt" || { echo "no classes printed"; exit 1; }
echo "installed runtime works through pkg-config and find_package(vitc)"
