# steal: the CLI end to end (server in the background, killed on exit) and the quick demo.
add_test(NAME steal.cli COMMAND ${CMAKE_SOURCE_DIR}/tests/steal/cli.sh $<TARGET_FILE:llmsys>)
set_tests_properties(steal.cli PROPERTIES TIMEOUT 90 LABELS steal)
add_test(NAME steal.demo_quick COMMAND sh -c "d=$(mktemp -d) && $<TARGET_FILE:llmsys> demo --quick --workdir $d steal; rc=$?; rm -rf $d; exit $rc")
set_tests_properties(steal.demo_quick PROPERTIES TIMEOUT 90 LABELS steal ENVIRONMENT "LLMSYS_PROGRESS=0")
# The attack's tests run a few dozen small attacks: about 40 s alone on a Zen 5 core, 55-60 s on a
# Zen 3 one; 300 s leaves room for a loaded machine and still means "hung".
set_tests_properties(steal.test_attack PROPERTIES TIMEOUT 300)
