# Writes OUT, a header defining MMGPT_GIT_COMMIT: the commit of the source tree
# SRC ("<sha>-dirty" with uncommitted changes to tracked files, "unknown"
# outside a git checkout or without git). Run at every build by the
# mmgpt_git_commit target; OUT is rewritten only when the commit changes, so an
# unchanged tree rebuilds nothing.
set(commit "unknown")
find_program(GIT git)
if(GIT)
  execute_process(COMMAND ${GIT} -C ${SRC} rev-parse --verify --quiet HEAD
                  OUTPUT_VARIABLE sha OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
  if(rc EQUAL 0 AND sha)
    set(commit ${sha})
    # Refresh the index's file times first, so that a file touched but not changed is not "dirty".
    execute_process(COMMAND ${GIT} -C ${SRC} update-index -q --refresh OUTPUT_QUIET ERROR_QUIET)
    execute_process(COMMAND ${GIT} -C ${SRC} diff-index --quiet HEAD --
                    RESULT_VARIABLE dirty OUTPUT_QUIET ERROR_QUIET)
    if(NOT dirty EQUAL 0)
      string(APPEND commit "-dirty")
    endif()
  endif()
endif()
set(text "#define MMGPT_GIT_COMMIT \"${commit}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
