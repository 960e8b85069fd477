# CMake generated Testfile for 
# Source directory: /work/main/tests
# Build directory: /work/main/build/tests
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
add_test(test_core "/work/main/build/tests/test_core")
set_tests_properties(test_core PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;11;add_test;/work/main/tests/CMakeLists.txt;14;swarm_test;/work/main/tests/CMakeLists.txt;0;")
add_test(test_model "/work/main/build/tests/test_model")
set_tests_properties(test_model PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;11;add_test;/work/main/tests/CMakeLists.txt;17;swarm_test;/work/main/tests/CMakeLists.txt;0;")
add_test(test_actors "/work/main/build/tests/test_actors")
set_tests_properties(test_actors PROPERTIES  _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;11;add_test;/work/main/tests/CMakeLists.txt;21;swarm_test;/work/main/tests/CMakeLists.txt;0;")
add_test(test_cluster "/work/main/build/tests/test_cluster")
set_tests_properties(test_cluster PROPERTIES  TIMEOUT "300" _BACKTRACE_TRIPLES "/work/main/tests/CMakeLists.txt;11;add_test;/work/main/tests/CMakeLists.txt;25;swarm_test;/work/main/tests/CMakeLists.txt;0;")
