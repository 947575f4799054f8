# Documentation that cannot drift (label docs): tests/check_docs.py runs every command block
# that README.md, docs/*.md and the technique READMEs mark with <!-- docs-test -->, and
# checks that the output they show is what build/train prints (docs/testing.md explains
# the convention). It also checks that the scripts the documents name exist and parse
# (plot scripts: --help with the torch virtualenv's python, which has matplotlib), that
# every `ctest -R/-L` and unit_tests "[tag]" they show selects something, and that CPU
# mpirun examples of more than 2 ranks say --oversubscribe. Standard-library python3 only.
# About 2 minutes on 2 cores (the 4- and 8-rank runs share them); TIMEOUT leaves room for
# a loaded machine.
set(DOCS_PYTHON_ARGS)
if(DEFINED PICOTRON_PYTHON AND EXISTS "${PICOTRON_PYTHON}")
  set(DOCS_PYTHON_ARGS --python "${PICOTRON_PYTHON}")
endif()
add_test(NAME docs.commands COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/check_docs.py
  --train ${CMAKE_BINARY_DIR}/train --root ${CMAKE_SOURCE_DIR} ${DOCS_PYTHON_ARGS})
set_tests_properties(docs.commands PROPERTIES LABELS docs TIMEOUT 900 ENVIRONMENT "${PICOTRON_TEST_ENV}"
  PROCESSORS 2 PASS_REGULAR_EXPRESSION "docs ok" FAIL_REGULAR_EXPRESSION "FAILED")

# Cross-references and counts (label docs, no build needed, under a second each):
# tests/check_references.py: every FILE, "Section" / FILE#anchor / [text](FILE#anchor) in the
# docs, the READMEs, code comments and the program's strings names a heading that exists;
# tests/check_counts.py: every count a page states about the code (tasks, points, wrong fills,
# schedules, ...) and docs/assignments/README.md's task table equal the code's, and every
# source file of a technique folder is named in its README.
add_test(NAME docs.references COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/check_references.py ${CMAKE_SOURCE_DIR})
set_tests_properties(docs.references PROPERTIES LABELS docs TIMEOUT 60
  PASS_REGULAR_EXPRESSION "references ok" FAIL_REGULAR_EXPRESSION "FAILED")
add_test(NAME docs.counts COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/check_counts.py ${CMAKE_SOURCE_DIR})
set_tests_properties(docs.counts PROPERTIES LABELS docs TIMEOUT 60
  PASS_REGULAR_EXPRESSION "counts ok" FAIL_REGULAR_EXPRESSION "FAILED")
