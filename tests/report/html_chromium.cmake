# The HTML page from reports of real 1- and 2-rank runs, loaded in headless
# chromium: no JavaScript errors, the four SVG plots rendered with their data.
# The screenshot stays in ${OUT}/report.png (a test artifact).
set(html ${OUT}/report.html)
execute_process(COMMAND ${TOOL} --html ${html} ${OUT}/train-np1.json ${OUT}/train-np2.json
                        ${OUT}/train-np2-fp16.json ${OUT}/bench-np2.json
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "dpt-report --html: exit ${rc}: ${err}")
endif()
file(READ ${html} page)
if(page MATCHES "(src|href)=\"(https?:)?//")
  message(FATAL_ERROR "${html} loads something from the network")
endif()
set(flags --headless --no-sandbox --disable-gpu --user-data-dir=${OUT}/chromium-profile
          --enable-logging=stderr --v=0 --virtual-time-budget=3000)
execute_process(COMMAND ${CHROMIUM} ${flags} --dump-dom file://${html}
                OUTPUT_VARIABLE dom ERROR_VARIABLE log RESULT_VARIABLE rc TIMEOUT 120)
file(WRITE ${OUT}/report.dom.html "${dom}")
file(WRITE ${OUT}/chromium.log "${log}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "chromium --dump-dom: exit ${rc}\n${log}")
endif()
if(log MATCHES "Uncaught|:CONSOLE[:(]|SyntaxError|ReferenceError|TypeError")
  message(FATAL_ERROR "JavaScript errors while loading ${html}:\n${log}")
endif()
# The inline script ran (it counts the plots) and every plot is there with data.
foreach(re "data-plots=\"4\"" "<svg id=\"plot-speed\"" "<svg id=\"plot-phases\""
           "<svg id=\"plot-learning-curve\"" "<svg id=\"plot-allreduce\""
           "class=\"ideal\"" "<circle class=\"pt\"" "<polyline class=\"curve\"" "<rect class=\"bar\"")
  if(NOT dom MATCHES "${re}")
    message(FATAL_ERROR "the page chromium rendered has no ${re} (see ${OUT}/report.dom.html)")
  endif()
endforeach()
# stacked bars: one per rank of each report (1 + 2 + 2 + 2 ranks)
string(REGEX MATCHALL "<title>rank [0-9]+ forward" fw "${dom}")
list(LENGTH fw n_fw)
if(NOT n_fw EQUAL 5)
  message(FATAL_ERROR "expected 5 forward bars (training runs: 1 + 2 + 2 ranks), found ${n_fw}")
endif()
file(REMOVE ${OUT}/report.png)
execute_process(COMMAND ${CHROMIUM} ${flags} --hide-scrollbars --window-size=1100,2200
                        --screenshot=${OUT}/report.png file://${html}
                OUTPUT_VARIABLE o ERROR_VARIABLE log RESULT_VARIABLE rc TIMEOUT 120)
file(SIZE ${OUT}/report.png size)
if(NOT rc EQUAL 0 OR size LESS 20000)
  message(FATAL_ERROR "chromium --screenshot: exit ${rc}, ${size} bytes\n${log}")
endif()
message(STATUS "screenshot: ${OUT}/report.png (${size} bytes)")
