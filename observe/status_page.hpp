#pragma once
// The coordinator's live status page, served at "/": observe/status_page.html,
// embedded into the binary at build time (cmake/embed.cmake). One document
// with inline CSS and JavaScript that polls "api/status" (relative, so it works
// behind any prefix) every 2 s and renders stages, trainers, two SVG charts and
// recent events in the browser. It loads nothing else (no CDN, web fonts or
// images): the machines of a swarm often have no internet access. All data
// goes into the DOM through textContent / setAttribute, never as HTML.

namespace swarm {

/// The page, as observe/status_page.html was when the binary was built.
const char* status_page_html();

}  // namespace swarm
