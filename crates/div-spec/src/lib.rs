//! Pure parsing and printing of what a div user types: entrypoints, checks, money, memory, SKUs, durations, slugs.
