"""No module of ``conch`` imports, even for type checking only, a module that imports it back.

The layers contract (``lint-imports``) checks imports between rooms; this checks every pair of modules,
within a room too. A circle is found as a module that reaches itself through the modules it imports.
"""

from __future__ import annotations

import grimp


def test_no_module_reaches_itself_through_its_imports() -> None:
    graph = grimp.build_graph("conch")
    circles = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            back = graph.find_shortest_chain(importer=imported, imported=module)
            if back is not None:
                circles.append(" -> ".join([module, *back]))
    assert circles == [], "import circles:\n" + "\n".join(circles)
