//! The div catalogue, container sizing, rates, what a ceiling buys and metering; pure.
