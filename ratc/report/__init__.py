"""Pictures and reports: pipeline diagrams, memory timelines, the HTML compile report, summaries."""
