# Documentation that cannot drift (label docs): tests/scripts/check_docs.py runs every command block
# that README.md, docs/*.md and the technique READMEs mark with <!-- docs-test -->, and
# checks that the output they show is what build/train prints (docs/testing.md explains
# the convention). It also checks that the scripts the documents name exist and parse
# (plot scripts: --help with the torch virtualenv's python, which has matplotlib), that
# every `ctest -R/-L` and unit_tests "[tag]" they show selects something, and that CPU
# mpirun examples of more than 2 ranks say --oversubscribe. Standard-library python3 only.
# Each document's blocks are a test of their own (below), so ctest runs them beside others;
# TIMEOUT leaves room for a loaded machine.
set(DOCS_PYTHON_ARGS)
if(DEFINED PICOTRON_PYTHON AND EXISTS "${PICOTRON_PYTHON}")
  set(DOCS_PYTHON_ARGS --python "${PICOTRON_PYTHON}")
endif()
add_test(NAME docs.commands COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/scripts/check_docs.py --no-blocks
  --train ${CMAKE_BINARY_DIR}/train --root ${CMAKE_SOURCE_DIR} ${DOCS_PYTHON_ARGS})
set_tests_properties(docs.commands PROPERTIES LABELS docs TIMEOUT 300 ENVIRONMENT "${PICOTRON_TEST_ENV}"
  PASS_REGULAR_EXPRESSION "docs ok" FAIL_REGULAR_EXPRESSION "FAILED")
# Each document's checked blocks: one test each (docs.commands.planner for docs/planner.md,
# docs.commands.readme for README.md, docs.commands.context_parallel for its README.md), two
# processors when its blocks run mpirun. Editing a document re-runs cmake (CMAKE_CONFIGURE_DEPENDS),
# so a document that gains its first checked block gets its test.
file(GLOB doc_files RELATIVE ${CMAKE_SOURCE_DIR} CONFIGURE_DEPENDS
  ${CMAKE_SOURCE_DIR}/README.md ${CMAKE_SOURCE_DIR}/docs/*.md ${CMAKE_SOURCE_DIR}/*/README.md)
foreach(doc ${doc_files})
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/${doc})
  file(STRINGS ${CMAKE_SOURCE_DIR}/${doc} marks REGEX "^<!-- docs-test")
  if(NOT marks)
    continue()
  endif()
  get_filename_component(name ${doc} NAME_WE)
  get_filename_component(folder ${doc} DIRECTORY)
  if(name STREQUAL "README")
    set(name "${folder}")
  endif()
  if(NOT name)  # the top-level README.md
    set(name readme)
  endif()
  file(STRINGS ${CMAKE_SOURCE_DIR}/${doc} ranks REGEX "^\\$ .*mpirun ")
  set(processors 1)
  if(ranks)
    set(processors 2)
  endif()
  add_test(NAME docs.commands.${name} COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/scripts/check_docs.py --blocks-only
    --only ${doc} --train ${CMAKE_BINARY_DIR}/train --root ${CMAKE_SOURCE_DIR} ${DOCS_PYTHON_ARGS})
  set_tests_properties(docs.commands.${name} PROPERTIES LABELS docs TIMEOUT 600 ENVIRONMENT "${PICOTRON_TEST_ENV}"
    PROCESSORS ${processors} PASS_REGULAR_EXPRESSION "docs ok" FAIL_REGULAR_EXPRESSION "FAILED")
endforeach()

# Cross-references and counts (label docs, no build needed, under a second each):
# tests/scripts/check_references.py: every FILE, "Section" / FILE#anchor / [text](FILE#anchor) in the
# docs, the READMEs, code comments and the program's strings names a heading that exists;
# tests/scripts/check_counts.py: every count a page states about the code (tasks, points, wrong fills,
# schedules, ...) and docs/assignments/README.md's task table equal the code's, and every
# source file of a technique folder is named in its README.
add_test(NAME docs.references COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/scripts/check_references.py ${CMAKE_SOURCE_DIR})
set_tests_properties(docs.references PROPERTIES LABELS docs TIMEOUT 60
  PASS_REGULAR_EXPRESSION "references ok" FAIL_REGULAR_EXPRESSION "FAILED")
# tests/scripts/check_source_lines.py: every FILE:LINE a page shows (--explain's and the flight
# recorder's call sites) still holds the line or the function the page shows.
add_test(NAME docs.source_lines COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/scripts/check_source_lines.py ${CMAKE_SOURCE_DIR})
set_tests_properties(docs.source_lines PROPERTIES LABELS docs TIMEOUT 60
  PASS_REGULAR_EXPRESSION "ok: source lines" FAIL_REGULAR_EXPRESSION "FAILED")
add_test(NAME docs.counts COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/scripts/check_counts.py ${CMAKE_SOURCE_DIR})
set_tests_properties(docs.counts PROPERTIES LABELS docs TIMEOUT 60
  PASS_REGULAR_EXPRESSION "counts ok" FAIL_REGULAR_EXPRESSION "FAILED")

# Every file path the program prints is relative to the repository root and names a file of
# the checkout that built it, also through a compiler cache shared with another checkout.
add_test(NAME paths.relative_source_paths COMMAND ${CMAKE_SOURCE_DIR}/tests/scripts/check_source_paths.sh ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
set_tests_properties(paths.relative_source_paths PROPERTIES LABELS docs TIMEOUT 120
  PASS_REGULAR_EXPRESSION "SOURCE PATHS OK" FAIL_REGULAR_EXPRESSION "FAILED|WRONG")

# Every shell script in scripts/ and tests/ passes shellcheck (its settings: .shellcheckrc;
# scripts/setup.sh installs it).
add_test(NAME lint.shellcheck COMMAND bash -c "cd ${CMAKE_SOURCE_DIR} && shellcheck --version | sed -n 2p && shellcheck scripts/*.sh tests/scripts/*.sh && echo SHELLCHECK OK")
set_tests_properties(lint.shellcheck PROPERTIES LABELS docs TIMEOUT 120 PASS_REGULAR_EXPRESSION "SHELLCHECK OK")
