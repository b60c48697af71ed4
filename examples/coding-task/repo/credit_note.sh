#!/bin/sh
# credit_note TOTAL_CENTS PERCENT: prints the amount of the credit note that
# refunds PERCENT of an invoice of TOTAL_CENTS, in cents.
credit_note() {
  total=$1
  percent=$2
  amount=$((total * percent / 100))
  echo "$amount"
}
