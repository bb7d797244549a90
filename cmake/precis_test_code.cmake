# precis_test_code_options(): in an optimised build (Release, RelWithDebInfo, MinSizeRel) the code
# that tests the library (tests/, docs/examples, docs/snippets) is compiled at -O1; call it at the
# top of each of those folders' CMakeLists.txt, before their targets.
#
# Why: compiling that code is a large part of CI's time (it is built three times on 2 cores), and
# its own speed is not what anything measures: the library's kernels, precis-train and precis-bench
# keep the build type's flags. Measured on Zen 4 (g++ 12, 2 cores): the test and snippet objects
# took 853 s of compile time at -O3 and 568 s at -O1; the suite ran in 84 s instead of 78 s.
# Results do not depend on the level: neither uses fast-math or FMA contraction, so a test's own
# f64 references and bit-for-bit comparisons compute the same values.
# The sanitizer builds (Sanitize) keep their -O1: at -O0 the instrumented test objects compiled in
# 368 s less, but the ASan suite ran 231 s longer on 2 cores (its f64 reference loops), a wash.
function(precis_test_code_options)
  add_compile_options("$<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CONFIG:Release,RelWithDebInfo,MinSizeRel>>:-O1>")
endfunction()
