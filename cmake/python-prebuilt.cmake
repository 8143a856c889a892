# `VITC_BUILD_DIR=DIR pip install .` (pyproject.toml): the wheel takes DIR's
# vitc and libvitc_runtime.so.0 as they are and nothing is compiled.  DIR is
# relative to the source directory, as setup.sh's VITC_BUILD_DIR is.  A
# sanitizer build is refused: its runtime cannot be loaded into a Python
# built without ASan.
set(vitc_prebuilt "$ENV{VITC_BUILD_DIR}")
if(NOT IS_ABSOLUTE "${vitc_prebuilt}")
  set(vitc_prebuilt "${CMAKE_SOURCE_DIR}/${vitc_prebuilt}")
endif()
set(vitc_prebuilt_missing "")
foreach(f vitc libvitc_runtime.so.0)
  if(NOT EXISTS "${vitc_prebuilt}/${f}")
    list(APPEND vitc_prebuilt_missing "${vitc_prebuilt}/${f}")
  endif()
endforeach()
if(vitc_prebuilt_missing)
  list(LENGTH vitc_prebuilt_missing n)
  list(JOIN vitc_prebuilt_missing " and " vitc_prebuilt_missing)
  if(n GREATER 1)
    string(APPEND vitc_prebuilt_missing " are")
  else()
    string(APPEND vitc_prebuilt_missing " is")
  endif()
  message(FATAL_ERROR "VITC_BUILD_DIR names a build to take the vitc CLI and the runtime library from, and "
                      "${vitc_prebuilt_missing} missing. Build it first (VITC_BUILD_DIR=... ./setup.sh), or "
                      "unset VITC_BUILD_DIR to have pip build vitc itself.")
endif()
if(EXISTS "${vitc_prebuilt}/CMakeCache.txt")
  file(STRINGS "${vitc_prebuilt}/CMakeCache.txt" vitc_prebuilt_sanitized REGEX "^VITC_(SANITIZE|FUZZ):BOOL=(ON|1|TRUE|YES)$")
  if(vitc_prebuilt_sanitized)
    message(FATAL_ERROR "${vitc_prebuilt} is a sanitizer build (VITC_SANITIZE/VITC_FUZZ): its runtime cannot be "
                        "loaded into a Python built without ASan. Point VITC_BUILD_DIR at a build without it, "
                        "or unset it to have pip build vitc itself.")
  endif()
endif()
# the library's real file (libvitc_runtime.so.0 is a link to it) under its SONAME
file(REAL_PATH "${vitc_prebuilt}/libvitc_runtime.so.0" vitc_prebuilt_lib)
install(PROGRAMS "${vitc_prebuilt}/vitc" DESTINATION vitc/_bin COMPONENT python)
install(FILES "${vitc_prebuilt_lib}" DESTINATION vitc/_lib RENAME libvitc_runtime.so.0 COMPONENT python)
message(STATUS "vitc: the wheel takes ${vitc_prebuilt}/vitc and ${vitc_prebuilt}/libvitc_runtime.so.0 (VITC_BUILD_DIR)")
