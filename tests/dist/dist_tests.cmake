# Distributed tests (label dist): precis_dist_tests has its own main (tests/dist/dist_main.cpp) and
# runs whole under `mpirun -np 2` and `-np 3` (oversubscribed on this 2-core machine, one thread
# per rank, as root in CI) and once without mpirun (a world of one, no MPI needed). The abort
# probe checks that an exception on one rank ends the job within 60 s. Without MPI the mpirun
# entries are registered as skipped (exit 77), loudly, not passed.
file(GLOB _dist_tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/dist/*_test.cpp)
add_executable(precis_dist_tests ${CMAKE_CURRENT_SOURCE_DIR}/dist/dist_main.cpp ${_dist_tests})
target_link_libraries(precis_dist_tests PRIVATE precis_test_support)
set(_dist_env OMP_NUM_THREADS=1 PRECIS_NUM_THREADS=1 OMP_WAIT_POLICY=passive)
add_test(NAME "dist/world of one (no mpirun)" COMMAND precis_dist_tests --warn NoTests)
set_tests_properties("dist/world of one (no mpirun)" PROPERTIES LABELS dist TIMEOUT 300 ENVIRONMENT "${_dist_env}")
if(PRECIS_WITH_MPI)
  add_executable(precis_dist_abort_probe ${CMAKE_CURRENT_SOURCE_DIR}/dist/abort_probe.cpp)
  target_link_libraries(precis_dist_abort_probe PRIVATE precis::precis)
  # vader's single-copy (CMA) mechanism fails inside containers; --bind-to none lets the
  # oversubscribed ranks share the cores.
  set(_mpirun ${MPIEXEC_EXECUTABLE} --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none
      -x OMP_NUM_THREADS -x PRECIS_NUM_THREADS -x OMP_WAIT_POLICY)
  # Local launches never use ssh/rsh, but Open MPI 4's rsh launcher fails the whole mpirun when its
  # agent is not on PATH (a bare root, a container): "false" is found everywhere and never run.
  set(_root_env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent=false)
  foreach(_np 2 3)
    add_test(NAME "dist/mpirun -np ${_np}" COMMAND ${_mpirun} ${MPIEXEC_NUMPROC_FLAG} ${_np} $<TARGET_FILE:precis_dist_tests>
             --warn NoTests)
    set_tests_properties("dist/mpirun -np ${_np}" PROPERTIES LABELS dist TIMEOUT 300 PROCESSORS 2
                         ENVIRONMENT "${_dist_env};${_root_env}")
  endforeach()
  add_test(NAME "dist/precis-train np 2 equals --accum 2 bit for bit; resume too"
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/train_equivalence.sh $<TARGET_FILE:precis-train>
                   ${CMAKE_CURRENT_BINARY_DIR}/dist-train-work ${_mpirun} ${MPIEXEC_NUMPROC_FLAG})
  set_tests_properties("dist/precis-train np 2 equals --accum 2 bit for bit; resume too" PROPERTIES LABELS dist
                       TIMEOUT 300 PROCESSORS 2 SKIP_RETURN_CODE 77 ENVIRONMENT "${_dist_env};${_root_env}")
  # Real SIGKILLs of the whole np 2 job at random moments; every chain resumes bit for bit.
  add_test(NAME "dist/precis-train np 2 killed at random moments resumes bit for bit"
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/train_kill_resume.sh $<TARGET_FILE:precis-train>
                   ${CMAKE_CURRENT_BINARY_DIR}/dist-kill-work 8 ${_mpirun} ${MPIEXEC_NUMPROC_FLAG})
  set_tests_properties("dist/precis-train np 2 killed at random moments resumes bit for bit" PROPERTIES LABELS dist
                       TIMEOUT 900 PROCESSORS 2 SKIP_RETURN_CODE 77 ENVIRONMENT "${_dist_env};${_root_env}")
  # ZeRO-1 through precis-train on a generated corpus (no data package needed): --zero equals plain
  # DDP at np 2 and 3, resumes (from its own or a plain checkpoint) and survives a killed rank.
  add_test(NAME "dist/precis-train --zero equals plain DDP at np 2 and 3 bit for bit; resume and a killed rank too"
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/train_zero.sh $<TARGET_FILE:precis-train>
                   ${CMAKE_CURRENT_BINARY_DIR}/dist-zero-work ${_mpirun} ${MPIEXEC_NUMPROC_FLAG})
  set_tests_properties("dist/precis-train --zero equals plain DDP at np 2 and 3 bit for bit; resume and a killed rank too"
                       PROPERTIES LABELS dist TIMEOUT 300 PROCESSORS 2 ENVIRONMENT "${_dist_env};${_root_env}")
  add_test(NAME "dist/ZeRO state saved at np 2 resumes at np 3 and np 1"
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/zero_reshard.sh $<TARGET_FILE:precis_dist_tests>
                   ${CMAKE_CURRENT_BINARY_DIR}/dist-zero-reshard ${_mpirun} ${MPIEXEC_NUMPROC_FLAG})
  set_tests_properties("dist/ZeRO state saved at np 2 resumes at np 3 and np 1" PROPERTIES LABELS dist TIMEOUT 300
                       PROCESSORS 2 ENVIRONMENT "${_dist_env};${_root_env}")
  add_test(NAME "dist/an exception on one rank ends the job (np 2)"
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/expect_abort.sh 60
                   ${_mpirun} ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:precis_dist_abort_probe>)
  set_tests_properties("dist/an exception on one rank ends the job (np 2)" PROPERTIES LABELS dist TIMEOUT 120
                       PROCESSORS 2 ENVIRONMENT "${_dist_env};${_root_env}")
  add_test(NAME "dist/a rank returning a failure status from main ends the job (np 2)"
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/dist/expect_abort.sh 60
                   ${_mpirun} ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:precis_dist_abort_probe> return)
  set_tests_properties("dist/a rank returning a failure status from main ends the job (np 2)" PROPERTIES LABELS dist
                       TIMEOUT 120 PROCESSORS 2 ENVIRONMENT "${_dist_env};${_root_env}")
else()
  foreach(_name "dist/mpirun -np 2" "dist/mpirun -np 3" "dist/an exception on one rank ends the job (np 2)"
                "dist/a rank returning a failure status from main ends the job (np 2)"
                "dist/precis-train np 2 equals --accum 2 bit for bit; resume too"
                "dist/precis-train np 2 killed at random moments resumes bit for bit"
                "dist/precis-train --zero equals plain DDP at np 2 and 3 bit for bit; resume and a killed rank too"
                "dist/ZeRO state saved at np 2 resumes at np 3 and np 1")
    add_test(NAME "${_name}" COMMAND sh -c "echo 'SKIPPED: precis was built without MPI (PRECIS_MPI; scripts/install-deps.sh installs Open MPI)'; exit 77")
    set_tests_properties("${_name}" PROPERTIES LABELS dist SKIP_RETURN_CODE 77)
  endforeach()
endif()
