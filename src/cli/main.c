#include <stdio.h>
int main(void) {
    puts("sdp");
    return 0;
}
