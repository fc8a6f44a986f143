"""Small Python problems with unit tests (and a reference solution each, to check the tests).

``public_tests`` are what the ``check_solution`` tool runs; the reward runs ``tests`` (all).
"""

from __future__ import annotations

__all__ = ["PROBLEMS"]


def _p(pid: str, prompt: str, reference: str, tests: list[str], public: int = 2) -> dict:
    return {
        "id": pid,
        "prompt": prompt,
        "reference": reference,
        "public_tests": tests[:public],
        "tests": tests,
    }


PROBLEMS: list[dict] = [
    _p(
        "add",
        "Write a function `add(a, b)` that returns the sum of two numbers.",
        "def add(a, b):\n    return a + b\n",
        ["assert add(1, 2) == 3", "assert add(-4, 4) == 0", "assert add(10, 25) == 35"],
    ),
    _p(
        "square",
        "Write a function `square(n)` that returns n multiplied by itself.",
        "def square(n):\n    return n * n\n",
        ["assert square(3) == 9", "assert square(0) == 0", "assert square(-5) == 25"],
    ),
    _p(
        "is_even",
        "Write a function `is_even(n)` that returns True if the integer n is even, else False.",
        "def is_even(n):\n    return n % 2 == 0\n",
        ["assert is_even(4) is True", "assert is_even(7) is False", "assert is_even(0) is True"],
    ),
    _p(
        "reverse_string",
        "Write a function `reverse_string(s)` that returns the string s reversed.",
        "def reverse_string(s):\n    return s[::-1]\n",
        [
            "assert reverse_string('abc') == 'cba'",
            "assert reverse_string('') == ''",
            "assert reverse_string('racecar') == 'racecar'",
        ],
    ),
    _p(
        "max_of_list",
        "Write a function `max_of_list(xs)` that returns the largest number in a non-empty list.",
        "def max_of_list(xs):\n    return max(xs)\n",
        [
            "assert max_of_list([1, 5, 3]) == 5",
            "assert max_of_list([-2, -9]) == -2",
            "assert max_of_list([7]) == 7",
        ],
    ),
    _p(
        "min_of_list",
        "Write a function `min_of_list(xs)` that returns the smallest number in a non-empty list.",
        "def min_of_list(xs):\n    return min(xs)\n",
        [
            "assert min_of_list([4, 2, 8]) == 2",
            "assert min_of_list([-1, -7, 3]) == -7",
            "assert min_of_list([5]) == 5",
        ],
    ),
    _p(
        "sum_list",
        "Write a function `sum_list(xs)` that returns the sum of a list of numbers (0 if empty).",
        "def sum_list(xs):\n    return sum(xs)\n",
        [
            "assert sum_list([1, 2, 3]) == 6",
            "assert sum_list([]) == 0",
            "assert sum_list([-1, 1]) == 0",
        ],
    ),
    _p(
        "count_vowels",
        "Write a function `count_vowels(s)` that returns how many vowels (a, e, i, o, u, either "
        "case) the string s contains.",
        "def count_vowels(s):\n    return sum(c in 'aeiouAEIOU' for c in s)\n",
        [
            "assert count_vowels('hello') == 2",
            "assert count_vowels('xyz') == 0",
            "assert count_vowels('AEIOU') == 5",
        ],
    ),
    _p(
        "factorial",
        "Write a function `factorial(n)` that returns n! for an integer n >= 0.",
        "def factorial(n):\n    result = 1\n    for i in range(2, n + 1):\n        result *= i\n"
        "    return result\n",
        [
            "assert factorial(0) == 1",
            "assert factorial(5) == 120",
            "assert factorial(10) == 3628800",
        ],
    ),
    _p(
        "fibonacci",
        "Write a function `fibonacci(n)` that returns the n-th Fibonacci number, with "
        "fibonacci(0) == 0 and fibonacci(1) == 1.",
        "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n"
        "    return a\n",
        [
            "assert fibonacci(0) == 0",
            "assert fibonacci(1) == 1",
            "assert fibonacci(10) == 55",
            "assert fibonacci(20) == 6765",
        ],
    ),
    _p(
        "is_palindrome",
        "Write a function `is_palindrome(s)` that returns True if the string s reads the same "
        "forwards and backwards.",
        "def is_palindrome(s):\n    return s == s[::-1]\n",
        [
            "assert is_palindrome('level') is True",
            "assert is_palindrome('hello') is False",
            "assert is_palindrome('') is True",
        ],
    ),
    _p(
        "celsius_to_fahrenheit",
        "Write a function `celsius_to_fahrenheit(c)` that converts degrees Celsius to Fahrenheit.",
        "def celsius_to_fahrenheit(c):\n    return c * 9 / 5 + 32\n",
        [
            "assert celsius_to_fahrenheit(0) == 32",
            "assert celsius_to_fahrenheit(100) == 212",
            "assert celsius_to_fahrenheit(-40) == -40",
        ],
    ),
    _p(
        "absolute",
        "Write a function `absolute(n)` that returns the absolute value of n without using abs().",
        "def absolute(n):\n    return -n if n < 0 else n\n",
        ["assert absolute(-3) == 3", "assert absolute(4) == 4", "assert absolute(0) == 0"],
    ),
    _p(
        "first_element",
        "Write a function `first_element(xs)` that returns the first item of a list, or None if "
        "the list is empty.",
        "def first_element(xs):\n    return xs[0] if xs else None\n",
        [
            "assert first_element([3, 4]) == 3",
            "assert first_element([]) is None",
            "assert first_element(['a']) == 'a'",
        ],
    ),
    _p(
        "last_element",
        "Write a function `last_element(xs)` that returns the last item of a list, or None if "
        "the list is empty.",
        "def last_element(xs):\n    return xs[-1] if xs else None\n",
        [
            "assert last_element([3, 4]) == 4",
            "assert last_element([]) is None",
            "assert last_element(['a']) == 'a'",
        ],
    ),
    _p(
        "count_occurrences",
        "Write a function `count_occurrences(xs, x)` that returns how many times x appears in "
        "the list xs.",
        "def count_occurrences(xs, x):\n    return xs.count(x)\n",
        [
            "assert count_occurrences([1, 2, 1, 1], 1) == 3",
            "assert count_occurrences([], 5) == 0",
            "assert count_occurrences(['a', 'b'], 'c') == 0",
        ],
    ),
    _p(
        "unique_sorted",
        "Write a function `unique_sorted(xs)` that returns the distinct items of xs in "
        "increasing order, as a list.",
        "def unique_sorted(xs):\n    return sorted(set(xs))\n",
        [
            "assert unique_sorted([3, 1, 3, 2]) == [1, 2, 3]",
            "assert unique_sorted([]) == []",
            "assert unique_sorted([5, 5]) == [5]",
        ],
    ),
    _p(
        "word_count",
        "Write a function `word_count(s)` that returns the number of words in s (words are "
        "separated by whitespace).",
        "def word_count(s):\n    return len(s.split())\n",
        [
            "assert word_count('hello world') == 2",
            "assert word_count('') == 0",
            "assert word_count('  one   two three ') == 3",
        ],
    ),
    _p(
        "average",
        "Write a function `average(xs)` that returns the mean of a non-empty list of numbers.",
        "def average(xs):\n    return sum(xs) / len(xs)\n",
        [
            "assert average([1, 2, 3]) == 2",
            "assert average([5]) == 5",
            "assert average([1, 2]) == 1.5",
        ],
    ),
    _p(
        "repeat_string",
        "Write a function `repeat_string(s, n)` that returns s repeated n times.",
        "def repeat_string(s, n):\n    return s * n\n",
        [
            "assert repeat_string('ab', 3) == 'ababab'",
            "assert repeat_string('x', 0) == ''",
            "assert repeat_string('', 5) == ''",
        ],
    ),
    _p(
        "remove_spaces",
        "Write a function `remove_spaces(s)` that returns s with every space character removed.",
        "def remove_spaces(s):\n    return s.replace(' ', '')\n",
        [
            "assert remove_spaces('a b c') == 'abc'",
            "assert remove_spaces('') == ''",
            "assert remove_spaces('  x ') == 'x'",
        ],
    ),
    _p(
        "is_prime",
        "Write a function `is_prime(n)` that returns True if the integer n is a prime number.",
        "def is_prime(n):\n    if n < 2:\n        return False\n    i = 2\n    while i * i <= n:\n"
        "        if n % i == 0:\n            return False\n        i += 1\n    return True\n",
        [
            "assert is_prime(2) is True",
            "assert is_prime(15) is False",
            "assert is_prime(1) is False",
            "assert is_prime(97) is True",
        ],
    ),
    _p(
        "gcd",
        "Write a function `gcd(a, b)` that returns the greatest common divisor of two positive "
        "integers.",
        "def gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a\n",
        ["assert gcd(12, 18) == 6", "assert gcd(7, 5) == 1", "assert gcd(100, 10) == 10"],
    ),
    _p(
        "sum_of_digits",
        "Write a function `sum_of_digits(n)` that returns the sum of the decimal digits of a "
        "non-negative integer n.",
        "def sum_of_digits(n):\n    return sum(int(d) for d in str(n))\n",
        [
            "assert sum_of_digits(123) == 6",
            "assert sum_of_digits(0) == 0",
            "assert sum_of_digits(9999) == 36",
        ],
    ),
    _p(
        "product",
        "Write a function `product(xs)` that returns the product of a list of numbers (1 if "
        "empty).",
        "def product(xs):\n    result = 1\n    for x in xs:\n        result *= x\n    return result\n",
        [
            "assert product([2, 3, 4]) == 24",
            "assert product([]) == 1",
            "assert product([5, 0]) == 0",
        ],
    ),
    _p(
        "to_upper",
        "Write a function `to_upper(s)` that returns s in upper case.",
        "def to_upper(s):\n    return s.upper()\n",
        [
            "assert to_upper('abc') == 'ABC'",
            "assert to_upper('') == ''",
            "assert to_upper('a1B') == 'A1B'",
        ],
    ),
    _p(
        "evens",
        "Write a function `evens(xs)` that returns the even numbers of the list xs, in order.",
        "def evens(xs):\n    return [x for x in xs if x % 2 == 0]\n",
        [
            "assert evens([1, 2, 3, 4]) == [2, 4]",
            "assert evens([]) == []",
            "assert evens([1, 3]) == []",
        ],
    ),
    _p(
        "string_length",
        "Write a function `string_length(s)` that returns the number of characters in s "
        "without using len().",
        "def string_length(s):\n    count = 0\n    for _ in s:\n        count += 1\n    return count\n",
        [
            "assert string_length('abc') == 3",
            "assert string_length('') == 0",
            "assert string_length('hello world') == 11",
        ],
    ),
    _p(
        "clamp",
        "Write a function `clamp(x, lo, hi)` that returns x limited to the range [lo, hi].",
        "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n",
        [
            "assert clamp(5, 0, 10) == 5",
            "assert clamp(-3, 0, 10) == 0",
            "assert clamp(42, 0, 10) == 10",
        ],
    ),
    _p(
        "fizzbuzz",
        "Write a function `fizzbuzz(n)` that returns 'Fizz' if n is divisible by 3, 'Buzz' if "
        "by 5, 'FizzBuzz' if by both, else str(n).",
        "def fizzbuzz(n):\n    if n % 15 == 0:\n        return 'FizzBuzz'\n    if n % 3 == 0:\n"
        "        return 'Fizz'\n    if n % 5 == 0:\n        return 'Buzz'\n    return str(n)\n",
        [
            "assert fizzbuzz(3) == 'Fizz'",
            "assert fizzbuzz(10) == 'Buzz'",
            "assert fizzbuzz(30) == 'FizzBuzz'",
            "assert fizzbuzz(7) == '7'",
        ],
    ),
    _p(
        "capitalize_words",
        "Write a function `capitalize_words(s)` that returns s with the first letter of every "
        "space-separated word in upper case and the rest unchanged.",
        "def capitalize_words(s):\n    return ' '.join(w[:1].upper() + w[1:] for w in s.split(' '))\n",
        [
            "assert capitalize_words('hello world') == 'Hello World'",
            "assert capitalize_words('') == ''",
            "assert capitalize_words('a bC') == 'A BC'",
        ],
    ),
    _p(
        "merge_sorted",
        "Write a function `merge_sorted(a, b)` that merges two sorted lists into one sorted list.",
        "def merge_sorted(a, b):\n    return sorted(a + b)\n",
        [
            "assert merge_sorted([1, 4], [2, 3]) == [1, 2, 3, 4]",
            "assert merge_sorted([], [1]) == [1]",
            "assert merge_sorted([], []) == []",
        ],
    ),
]
